// Quantized tensors (core/quant/): the safetensors convention for quantized parameters
// (round trips, and the errors of files that break it), the messages of refused arguments,
// printing, and rounding checked against hand-worked values. PyTorch's values for the
// quantize kernels and the observers are in the conformance suite (golden group "quant").
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/anvil.h"
#include "core/io/safetensors.h"
#include "core/quant/choose_qparams.h"
#include "core/quant/histogram_observer.h"
#include "core/quant/observer.h"
#include "core/quant/qtensor.h"
#include "core/quant/serialize.h"
#include "tests/core/test_util.h"

namespace anvil::quant {
namespace {

using test::ErrorOf;
using ::testing::HasSubstr;

io::Safetensors RoundTrip(const io::NamedTensors& tensors, const io::Metadata& metadata) {
  return io::parse_safetensors(io::serialize_safetensors(tensors, metadata), "memory");
}

void ExpectSameQTensor(const QTensor& got, const QTensor& want) {
  EXPECT_EQ(got.dtype, want.dtype);
  EXPECT_EQ(got.qscheme, want.qscheme);
  EXPECT_EQ(got.axis, want.axis);
  ASSERT_EQ(got.data.dtype(), want.data.dtype());
  EXPECT_EQ(got.data.sizes(), want.data.sizes());
  EXPECT_EQ(got.data.to(kInt64).to_vector<int64_t>(), want.data.to(kInt64).to_vector<int64_t>());
  EXPECT_EQ(got.scales.to_vector<double>(), want.scales.to_vector<double>());
  EXPECT_EQ(got.zero_points.to_vector<int64_t>(), want.zero_points.to_vector<int64_t>());
  EXPECT_EQ(dequantize(got).to_vector<float>(), dequantize(want).to_vector<float>());
}

TEST(QuantSafetensors, PerTensorAndPerChannelRoundTripBesidePlainTensors) {
  const QTensor a = quantize_per_tensor(randn({3, 4}), 0.0625, 7, QDtype::QUInt8);
  const QTensor w = quantize_per_channel(randn({5, 2, 3}), tensor(std::vector<double>{0.1, 0.02, 0.5, 0.003, 1.0}),
                                         tensor(std::vector<int64_t>{0, -3, 5, -128, 127}), 0, QDtype::QInt8);
  io::NamedTensors tensors{{"bias", randn({5})}};
  io::Metadata metadata{{"format", "anvil"}};
  append_qtensor("fc.act", a, &tensors, &metadata);
  append_qtensor("fc.weight", w, &tensors, &metadata);
  const io::Safetensors file = RoundTrip(tensors, metadata);

  // The convention's names and dtypes, as a reader without Anvil sees them.
  ASSERT_NE(file.find("fc.weight"), nullptr);
  EXPECT_EQ(file.find("fc.weight")->dtype(), kInt8);
  EXPECT_EQ(file.find("fc.act")->dtype(), kUInt8);
  EXPECT_EQ(file.find("fc.weight.scale")->dtype(), kFloat64);  // 0.1 (a double) is no float32 value
  EXPECT_EQ(file.find("fc.act.scale")->dtype(), kFloat32);     // 0.0625 is one: 4 bytes lose nothing
  EXPECT_EQ(file.find("fc.weight.zero_point")->dtype(), kInt32);
  EXPECT_EQ(file.metadata.at("format"), "anvil");
  EXPECT_TRUE(has_qtensor(file, "fc.weight"));
  EXPECT_FALSE(has_qtensor(file, "bias"));

  ExpectSameQTensor(read_qtensor(file, "fc.act"), a);
  ExpectSameQTensor(read_qtensor(file, "fc.weight"), w);
}

TEST(QuantSafetensors, ErrorsNameTheTensorAndWhatIsWrong) {
  const QTensor w = quantize_per_channel(randn({3, 2}), tensor(std::vector<double>{0.1, 0.2, 0.3}),
                                         tensor(std::vector<int64_t>{0, 1, 2}), 0, QDtype::QInt8);
  io::NamedTensors tensors;
  io::Metadata metadata;
  append_qtensor("w", w, &tensors, &metadata);

  EXPECT_THAT(ErrorOf([&] { read_qtensor(RoundTrip(tensors, metadata), "v"); }),
              HasSubstr("quantized tensor 'v': the metadata has no entry 'v.quant'"));

  io::NamedTensors no_scale = tensors;
  no_scale.erase(no_scale.begin() + 1);
  EXPECT_THAT(ErrorOf([&] { read_qtensor(RoundTrip(no_scale, metadata), "w"); }),
              HasSubstr("the file has no tensor 'w.scale'"));

  io::NamedTensors wrong_dtype = tensors;
  wrong_dtype[0].second = wrong_dtype[0].second.to(kUInt8);
  EXPECT_THAT(ErrorOf([&] { read_qtensor(RoundTrip(wrong_dtype, metadata), "w"); }),
              HasSubstr("qint8 is stored as int8, got uint8"));

  io::NamedTensors two_scales = tensors;
  two_scales[1].second = tensor(std::vector<double>{0.1, 0.2});
  EXPECT_THAT(ErrorOf([&] { read_qtensor(RoundTrip(two_scales, metadata), "w"); }),
              HasSubstr("expected 3 scales and zero points, got 2 and 3"));

  io::Metadata bad_axis = metadata;
  bad_axis["w.quant"] = R"({"dtype":"qint8","qscheme":"per_channel_affine","axis":2})";
  EXPECT_THAT(ErrorOf([&] { read_qtensor(RoundTrip(tensors, bad_axis), "w"); }),
              HasSubstr("axis 2 is out of range for a tensor of 2 dimensions"));

  io::Metadata bad_json = metadata;
  bad_json["w.quant"] = "{not json";
  EXPECT_THAT(ErrorOf([&] { read_qtensor(RoundTrip(tensors, bad_json), "w"); }),
              HasSubstr("expected a metadata entry"));

  io::Metadata bad_scheme = metadata;
  bad_scheme["w.quant"] = R"({"dtype":"qint8","qscheme":"per_row","axis":0})";
  EXPECT_THAT(ErrorOf([&] { read_qtensor(RoundTrip(tensors, bad_scheme), "w"); }), HasSubstr("got 'per_row'"));
}

TEST(QuantTensor, RoundsHalfToEvenAndClamps) {
  // x / scale = -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, then far outside [0, 255] - 3.
  const QTensor q =
      quantize_per_tensor(tensor({-1.25, -0.75, -0.25, 0.25, 0.75, 1.25, 1000.0, -1000.0}), 0.5, 3, QDtype::QUInt8);
  EXPECT_EQ(q.data.to(kInt64).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 3, 3, 5, 5, 255, 0}));
  EXPECT_EQ(dequantize(q).to_vector<float>(),
            (std::vector<float>{-1.0f, -1.0f, 0.0f, 0.0f, 1.0f, 1.0f, 126.0f, -1.5f}));
  EXPECT_EQ(q.q_scale(), 0.5);
  EXPECT_EQ(q.q_zero_point(), 3);
}

TEST(QuantTensor, PerChannelUsesEachChannelsParameters) {
  // Channels along dimension 1: scales 1 and 0.25, zero points 0 and -10.
  const QTensor q =
      quantize_per_channel(tensor({1.0, 1.0, 2.5, 2.5}, {}).reshape({2, 2}), tensor(std::vector<double>{1.0, 0.25}),
                           tensor(std::vector<int64_t>{0, -10}), 1, QDtype::QInt8);
  EXPECT_EQ(q.data.to(kInt64).to_vector<int64_t>(), (std::vector<int64_t>{1, -6, 2, 0}));
  EXPECT_THAT(ErrorOf([&] { (void)q.q_scale(); }), HasSubstr("expected a per-tensor quantized tensor"));
}

TEST(QuantTensor, RefusesWithMessages) {
  EXPECT_THAT(ErrorOf([] {
                quantize_per_tensor(tensor({1, 2}), 0.1, 0, QDtype::QUInt8);
              }),
              HasSubstr("expected a floating-point tensor, got int64"));
  EXPECT_THAT(ErrorOf([] { quantize_per_tensor(tensor({1.0}), 0.1, 128, QDtype::QInt8); }),
              HasSubstr("zero_point 128 is out of range for qint8 (expected -128..127)"));
  EXPECT_THAT(ErrorOf([] { quantize_per_tensor(tensor({1.0}), 0.0, 0, QDtype::QInt8); }),
              HasSubstr("scale must be positive and finite"));
  EXPECT_THAT(ErrorOf([] {
                quantize_per_channel(randn({2, 3}), tensor(std::vector<double>{0.1}), tensor(std::vector<int64_t>{0}),
                                     1, QDtype::QUInt8);
              }),
              HasSubstr("expected one scale per index of dimension 1 (3), got 1"));
}

TEST(QuantTensor, PrintsLikePyTorch) {
  const std::string s = to_string(quantize_per_tensor(tensor({0.5, -1.0}), 0.5, 3, QDtype::QUInt8));
  EXPECT_THAT(s, HasSubstr("size=(2,), dtype=torch.quint8"));
  EXPECT_THAT(s, HasSubstr("quantization_scheme=torch.per_tensor_affine, scale=0.5, zero_point=3)"));
  const std::string c = to_string(quantize_per_channel(randn({2, 2}), tensor(std::vector<double>{0.1, 0.2}),
                                                       tensor(std::vector<int64_t>{0, 1}), 0, QDtype::QInt8));
  EXPECT_THAT(c, HasSubstr("quantization_scheme=torch.per_channel_affine"));
  EXPECT_THAT(c, HasSubstr("axis=0)"));
}

TEST(QuantObserver, RefusesWithMessages) {
  ObserverOptions o;
  o.quant_min = 1;
  o.quant_max = 10;
  EXPECT_THAT(ErrorOf([&] { MinMaxObserver m(o); }), HasSubstr("must include 0, got [1, 10]"));
  o.quant_min.reset();
  EXPECT_THAT(ErrorOf([&] { MinMaxObserver m(o); }), HasSubstr("give both quant_min and quant_max"));
  ObserverOptions pc;
  pc.qscheme = QScheme::PerChannelAffine;
  EXPECT_THAT(ErrorOf([&] { HistogramObserver h(2048, pc); }), HasSubstr("got per_channel_affine"));
  PerChannelMinMaxObserver ch(1);
  ch.forward(randn({2, 3}));
  EXPECT_THAT(ErrorOf([&] { ch.forward(randn({2, 4})); }), HasSubstr("observed 3 channels before, got 4"));
}

TEST(QuantObserver, ZeroIsRepresentableAndScaleIsFloored) {
  // All positive: the range is widened to [0, max], so the zero point is quant_min.
  MinMaxObserver m;
  m.forward(tensor({2.0, 5.1}));
  const QParams p = m.calculate_qparams();
  EXPECT_EQ(p.zero_point.to(kInt64).to_vector<int64_t>(), std::vector<int64_t>{0});
  EXPECT_FLOAT_EQ(p.scale.to_vector<float>()[0], 5.1f / 255.0f);
  // All zeros: the scale is float32's epsilon.
  MinMaxObserver z;
  z.forward(zeros({4}));
  EXPECT_EQ(z.calculate_qparams().scale.to_vector<float>()[0], FLT_EPSILON);
}

TEST(QuantChooseQParams, DoublePrecisionScaleAndNudgedZeroPoint) {
  // [-1, 3] over [0, 255]: scale 4 / 255 in double; zero point 63.75 rounds to 64.
  const ChosenQParams p = choose_quantization_params(-1.0f, 3.0f, 0, 255);
  EXPECT_EQ(p.scale, 4.0 / 255.0);
  EXPECT_EQ(p.zero_point, 64);
  EXPECT_EQ(choose_quantization_params(0.0f, 0.0f, 0, 255).scale, 0.1);
  EXPECT_THAT(ErrorOf([] { choose_quantization_params(1.0f, 0.0f, 0, 255); }),
              HasSubstr("min should be less than or equal to max"));
}

}  // namespace
}  // namespace anvil::quant
