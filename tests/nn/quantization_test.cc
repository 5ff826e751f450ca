// Post-training quantization of whole models (core/quant/quantize.h, ptq.h): the digits
// models within the issue's accuracy bounds, the accuracy gate, the model archive's int8
// form, and the refusals. The layers' numbers against PyTorch are the conformance group
// qlayers; the kernels' against the reference are int8_gemm_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/anvil.h"
#include "core/backend/cpu/isa.h"
#include "core/io/safetensors.h"
#include "core/models/archive.h"
#include "core/models/spec.h"
#include "core/quant/ptq.h"
#include "core/quant/qtensor_kernels.h"
#include "core/quant/quantize.h"
#include "core/quant/quantized_layers.h"
#include "core/quant/requantize.h"
#include "tests/core/test_util.h"
#include "tests/nn/digits_recipe.h"

namespace anvil::quant {
namespace {

using ::testing::HasSubstr;

// An archive path of this process's own: the suite also runs once per GEMM backend, and those
// runs go side by side, so a shared name would let one run load what another has just saved.
std::string ScratchArchive(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("anvil_quant_" + name + "_" + std::to_string(::getpid()) + ".anvil"))
      .string();
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---- the per-batch kernels (qtensor_kernels.h, requantize.h) against their definitions ----
// The kernels run vector loops with a scalar tail; these compare every element, specials and
// ties included, with the formulas written out element by element.

std::vector<float> KernelInputs(int64_t n, float spread) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-spread, spread);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = u(rng);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {std::nanf(""), inf,   -inf,  0.0f,  -0.0f,  0.5f, 1.5f,
                            2.5f,          -0.5f, -2.5f, 1e30f, -1e30f, 3e38f};
  for (size_t i = 0; i < std::size(specials); ++i) x[i * 3] = specials[i];  // spread over vector lanes and the tail
  return x;
}

// Every ISA level up to the one in effect, lowest first, and a name for messages: the kernels
// run the loops of the level in effect (16 lanes at avx512 and above, 8 at avx2, scalar at
// generic), so each level's loops are compared with the formulas on this machine.
template <typename F>
void AtEveryIsaLevel(const F& f) {
  for (int lv = 0; lv <= static_cast<int>(cpu::active_isa()); ++lv) {
    const cpu::ScopedIsa level(static_cast<CpuIsa>(lv));
    SCOPED_TRACE(std::string("ISA level ") + std::string(isa_name(static_cast<CpuIsa>(lv))));
    f();
  }
}

TEST(QuantizedKernels, QuantizeAndDequantizeMatchTheirFormulasElementByElement) {
  AtEveryIsaLevel([] {
    const int64_t n = 77;  // 16-lane blocks, an 8-lane block and a tail
    for (const auto& [scale, zp] :
         std::vector<std::pair<double, int64_t>>{{0.05, 128}, {1.0, 0}, {0.5, 255}, {0.3, 3}}) {
      const std::vector<float> x = KernelInputs(n, 200.0f);
      std::vector<uint8_t> q(static_cast<size_t>(n)), q_fma(static_cast<size_t>(n));
      quantize_to_uint8(x.data(), n, scale, zp, q.data());
      quantize_to_uint8_fma(x.data(), n, scale, zp, q_fma.data());
      std::vector<float> back(static_cast<size_t>(n));
      dequantize_uint8(q.data(), n, scale, zp, back.data());
      const float inv = 1.0f / static_cast<float>(scale), fzp = static_cast<float>(zp);
      for (int64_t i = 0; i < n; ++i) {
        // clamp(zp + nearbyint(x / scale), 0, 255), NaN to 0.
        const float v = fzp + std::nearbyint(x[i] * inv);
        const uint8_t want = !(v >= 0.0f) ? 0 : v > 255.0f ? 255 : static_cast<uint8_t>(v);
        EXPECT_EQ(q[i], want) << "x = " << x[i] << ", scale " << scale << ", zero point " << zp;
        // fbgemm's: nearbyint(clamp(fma(x, 1 / scale, zp), 0, 255)).
        const float f = std::fma(x[i], inv, fzp);
        const uint8_t want_fma = !(f >= 0.0f) ? 0 : static_cast<uint8_t>(std::nearbyint(std::min(f, 255.0f)));
        EXPECT_EQ(q_fma[i], want_fma) << "x = " << x[i] << ", scale " << scale << ", zero point " << zp;
        EXPECT_EQ(back[i], static_cast<float>(static_cast<int32_t>(q[i]) - static_cast<int32_t>(zp)) *
                               static_cast<float>(scale));
      }
    }
  });
}

// Rows with a stride (vectors per row and a tail) and contiguous narrow rows (run flat, the
// column constants tiled): {m, n, row stride}.
class QuantizedKernelsRequantize : public ::testing::TestWithParam<std::array<int64_t, 3>> {};

TEST_P(QuantizedKernelsRequantize, ToUint8MatchesItsFormulaElementByElement) {
  // Named copies, not structured bindings: the lambda below captures them (clang before 16
  // cannot capture a binding).
  const int64_t m = GetParam()[0], n = GetParam()[1], ld = GetParam()[2];
  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> acc_dist(-3000000, 3000000), sum_dist(-20000, 20000);
  std::uniform_real_distribution<float> scale_dist(1e-4f, 2e-2f), bias_dist(-5.0f, 5.0f);
  std::vector<int32_t> acc(static_cast<size_t>(m * ld)), row_sums(static_cast<size_t>(n));
  for (int32_t& a : acc) a = acc_dist(rng);
  acc[3] = std::numeric_limits<int32_t>::max();
  acc[4] = std::numeric_limits<int32_t>::min();
  for (int32_t& r : row_sums) r = sum_dist(rng);
  std::vector<float> w_scales(static_cast<size_t>(n)), bias(static_cast<size_t>(n));
  for (float& w : w_scales) w = scale_dist(rng);
  for (float& b : bias) b = bias_dist(rng);
  bias[1 % n] = std::nanf("");
  bias[2 % n] = std::numeric_limits<float>::infinity();
  bias[9 % n] = 1e36f;       // a product past 2^63
  w_scales[5 % n] = 1e-30f;  // a tiny scale: an enormous bias term and multiplier
  AtEveryIsaLevel([&] {
    for (const bool per_channel : {true, false}) {
      for (const bool relu : {false, true}) {
        for (const bool with_bias : {true, false}) {
          for (const float out_scale : {0.02f, 1e-9f}) {
            const float a_scale = 0.03f;
            const int32_t a_zp = 7, out_zp = 100;
            const GemmEpilogue e{row_sums.data(), w_scales.data(), per_channel, with_bias ? bias.data() : nullptr,
                                 relu};
            const RequantConstants k = requant_constants(a_scale, w_scales.data(), per_channel, n, out_scale);
            std::vector<uint8_t> out(static_cast<size_t>(m * ld), 0);
            requantize_to_uint8(acc.data(), ld, m, n, a_zp, e, k, out_zp, out.data(), ld);
            // The layers' fused form: the same bytes, dequantized as dequantize_uint8 does.
            const float out_dq_scale = 0.0371f;
            std::vector<float> fused(static_cast<size_t>(m * ld), -1.0f);
            requantize_to_dequantized_float(acc.data(), ld, m, n, a_zp, e, k, out_zp, out_dq_scale, fused.data(), ld);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < n; ++j) {
                // fbgemm's ReQuantizeOutput with a float bias, written out.
                const float s = a_scale * w_scales[per_channel ? j : 0];
                const float mult = s / out_scale;
                // int32 arithmetic that wraps (fbgemm's), computed in int64 and taken modulo 2^32.
                const auto raw = static_cast<int32_t>(
                    static_cast<uint32_t>(int64_t{acc[i * ld + j]} - int64_t{a_zp} * int64_t{row_sums[j]}));
                float v = static_cast<float>(raw);
                if (with_bias) v = v + (per_channel ? bias[j] / s : bias[j] * (1.0f / s));
                const long r = std::lrintf(v * mult) + out_zp;
                const uint8_t want = static_cast<uint8_t>(std::clamp(r, relu ? long{out_zp} : 0L, 255L));
                ASSERT_EQ(out[i * ld + j], want)
                    << "row " << i << ", column " << j << (per_channel ? ", per channel" : "") << (relu ? ", relu" : "")
                    << (with_bias ? ", bias" : "") << ", out scale " << out_scale;
                ASSERT_EQ(fused[i * ld + j], static_cast<float>(static_cast<int32_t>(want) - out_zp) * out_dq_scale)
                    << "dequantized, row " << i << ", column " << j;
              }
            }
          }
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(QuantizedKernels, QuantizedKernelsRequantize,
                         ::testing::Values(std::array<int64_t, 3>{3, 29, 32}, std::array<int64_t, 3>{7, 6, 6},
                                           std::array<int64_t, 3>{5, 10, 10}, std::array<int64_t, 3>{4, 29, 29},
                                           std::array<int64_t, 3>{1, 5, 5}, std::array<int64_t, 3>{3, 16, 16},
                                           std::array<int64_t, 3>{9, 40, 40}, std::array<int64_t, 3>{2, 70, 80}));

// The convolution's epilogue over NCHW planes of float32 integer sums (the exact float path)
// gives the GEMM epilogue's bits for the same sums in [pixels, channels] int32 order.
TEST(QuantizedKernels, ThePlanesEpilogueMatchesTheGemmEpilogue) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> sums(-(1 << 23), (1 << 23));
  for (const std::array<int64_t, 3>& shape :
       std::vector<std::array<int64_t, 3>>{{2, 6, 64}, {1, 3, 17}, {3, 1, 7}, {2, 5, 9}, {2, 3, 41}}) {
    const int64_t images = shape[0], channels = shape[1], plane = shape[2];
    std::vector<int32_t> acc(static_cast<size_t>(images * channels * plane));  // [images, plane, channels]
    for (int32_t& v : acc) v = sums(rng) >> (rng() % 16);                      // small and large sums
    std::vector<float> planes(acc.size());                                     // [images, channels, plane]
    for (int64_t n = 0; n < images; ++n)
      for (int64_t p = 0; p < plane; ++p)
        for (int64_t c = 0; c < channels; ++c)
          planes[static_cast<size_t>((n * channels + c) * plane + p)] =
              static_cast<float>(acc[static_cast<size_t>((n * plane + p) * channels + c)]);
    std::vector<float> w_scales(static_cast<size_t>(channels)), bias(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) {
      w_scales[static_cast<size_t>(c)] = 0.001f * static_cast<float>(c + 1);
      bias[static_cast<size_t>(c)] = 0.37f * static_cast<float>(c) - 1.0f;
    }
    const std::vector<int32_t> row_sums(static_cast<size_t>(channels), 12345);  // ignored: input zero point 0
    AtEveryIsaLevel([&] {
      for (const bool per_channel : {true, false}) {
        for (const bool relu : {false, true}) {
          for (const bool with_bias : {true, false}) {
            const GemmEpilogue e{row_sums.data(), w_scales.data(), per_channel, with_bias ? bias.data() : nullptr,
                                 relu};
            const RequantConstants k = requant_constants(0.02f, w_scales.data(), per_channel, channels, 0.05f);
            std::vector<uint8_t> want(acc.size()), got(acc.size());
            requantize_to_uint8(acc.data(), channels, images * plane, channels, 0, e, k, 90, want.data(), channels);
            requantize_planes_to_uint8(planes.data(), images, channels, plane, e, k, 90, got.data());
            for (int64_t n = 0; n < images; ++n)
              for (int64_t p = 0; p < plane; ++p)
                for (int64_t c = 0; c < channels; ++c)
                  ASSERT_EQ(got[static_cast<size_t>((n * channels + c) * plane + p)],
                            want[static_cast<size_t>((n * plane + p) * channels + c)])
                      << "image " << n << ", channel " << c << ", pixel " << p << (per_channel ? ", per channel" : "")
                      << (relu ? ", relu" : "") << (with_bias ? ", bias" : "");
          }
        }
      }
    });
  }
}

// QuantizedConv2d's two paths (quantized_layers.h) give the same bits on random geometries,
// input channels 1 to 5, with inputs that saturate the quantization grid; kAuto picks the exact
// float path for few channels only.
TEST(QuantizedLayers, BothConvolutionPathsGiveTheSameBits) {
  manual_seed(21);
  std::mt19937 rng(21);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t C = pick(1, 5), OC = pick(1, 9), kh = pick(1, 5), kw = pick(1, 5);
    nn::ConvOptions o;
    o.stride = {pick(1, 2), pick(1, 2)};
    o.dilation = {pick(1, 2), pick(1, 2)};
    o.padding = {pick(0, 2), pick(0, 2)};
    const int64_t H = o.dilation[0] * (kh - 1) + pick(1, 9), W = o.dilation[1] * (kw - 1) + pick(1, 9);
    const bool per_channel = trial % 2 == 0, relu = trial % 3 == 0, with_bias = trial % 4 != 1;
    const Tensor wf = randn({OC, C, kh, kw}) * 0.3;
    const QTensor w = per_channel ? quantize_per_channel(wf, amax(wf.abs().reshape({OC, -1}), {1}).to(kFloat64) / 127.5,
                                                         zeros({OC}, kInt64), 0, QDtype::QInt8)
                                  : quantize_per_tensor(wf, 0.3 * 3.0 / 127.5, 0, QDtype::QInt8);
    const Tensor bias = with_bias ? randn({OC}) : Tensor();
    const ActivationQParams in{0.04, pick(0, 255)}, out{0.08, pick(0, 255)};
    QuantizedConv2d gemm(w, bias, o, in, out, relu, Int8ConvPath::kGemm);
    QuantizedConv2d exact(w, bias, o, in, out, relu, Int8ConvPath::kExactFloat);
    ASSERT_EQ(gemm.path(), Int8ConvPath::kGemm);
    ASSERT_EQ(exact.path(), Int8ConvPath::kExactFloat);
    if (std::getenv("ANVIL_INT8_CONV") == nullptr) {
      QuantizedConv2d chosen(w, bias, o, in, out, relu);
      EXPECT_EQ(chosen.path(), C <= 3 ? Int8ConvPath::kExactFloat : Int8ConvPath::kGemm) << C << " channels";
    }
    const Tensor x = randn({pick(1, 3), C, H, W}) * 6.0;  // past the grid's [-4.8, 5.4] and more
    const Tensor a = gemm.forward(x), b = exact.forward(x);
    ASSERT_EQ(a.sizes(), b.sizes());
    const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
    for (size_t i = 0; i < av.size(); ++i)
      ASSERT_EQ(av[i], bv[i]) << "trial " << trial << ": element " << i << " of " << shape_str(a.sizes()) << ", C " << C
                              << ", kernel " << kh << "x" << kw;
    // One image without the batch dimension takes the same path.
    EXPECT_TRUE(equal(exact.forward(x[0]), a[0]));
  }
  // Past 512 terms float32 sums are not exact: the int8 GEMM runs even when asked otherwise.
  const QTensor wide = quantize_per_tensor(randn({2, 3, 16, 16}), 0.02, 0, QDtype::QInt8);
  EXPECT_EQ(QuantizedConv2d(wide, Tensor(), {}, {0.1, 0}, {0.1, 0}, false, Int8ConvPath::kExactFloat).path(),
            Int8ConvPath::kGemm);
}

const char* kCnnSpec = R"({"input_shape": [1, 8, 8], "layers": [
    {"type": "conv2d", "out_channels": 6, "kernel_size": 3, "padding": "same"}, {"type": "batchnorm2d"},
    {"type": "relu"}, {"type": "maxpool2d", "kernel_size": 2}, {"type": "flatten"},
    {"type": "linear", "out_features": 32}, {"type": "relu"}, {"type": "linear", "out_features": 10}]})";

// A spec model with non-trivial batch-norm statistics, calibrated on random batches.
std::shared_ptr<nn::Module> CalibratedCnn(const Tensor& calibration) {
  manual_seed(3);
  auto model = models::build_model(kCnnSpec).module;
  {
    NoGradGuard g;
    for (auto& [name, b] : model->named_buffers())
      if (name.find("running_var") != std::string::npos)
        b.uniform_(0.5, 2.0);
      else if (name.find("running_mean") != std::string::npos)
        b.normal_(0.0, 0.2);
  }
  model->eval();
  EXPECT_EQ(fuse_modules(*model).size(), 2u);  // conv+bn+relu, linear+relu
  EXPECT_EQ(prepare(*model), 3);
  NoGradGuard g;
  for (int64_t i = 0; i < calibration.size(0); ++i) model->forward(calibration[i]);
  const std::vector<ConvertedLayer> done = convert(*model);
  EXPECT_EQ(done.size(), 3u);
  for (const ConvertedLayer& c : done) EXPECT_TRUE(c.reason.empty()) << c.path << ": " << c.reason;
  return model;
}

// The int8 layers run their passes (quantize or im2row, product, requantize) block by block,
// each thread over its share of the rows: a row's bits do not depend on the batch around it,
// on the thread count, or on where the blocks fall. Each row alone (a product split by
// columns) is the reference for the static layers; the dynamic layer, whose parameters come
// from the whole batch, must give one result at every thread count.
TEST(QuantizedLayers, ARowsBitsDoNotDependOnTheBatchOrTheThreads) {
  anvil::test::ThreadsGuard restore;
  manual_seed(31);
  const int64_t k = 70, n = 100, m = 301;  // n >= 64: one row alone splits by columns
  const Tensor wf = randn({n, k}) * 0.2;
  const QTensor w =
      quantize_per_channel(wf, amax(wf.abs(), {1}).to(kFloat64) / 127.5, zeros({n}, kInt64), 0, QDtype::QInt8);
  const Tensor bias = randn({n});
  QuantizedLinear linear(w, bias, {0.03, 120}, {0.05, 100}, true);
  DynamicQuantizedLinear dynamic(w, bias, false);
  DynamicQuantizedLinear dynamic_onnx(w, bias, false, DynamicActivations::kOnnx);
  const Tensor x = randn({m, k}) * 2.0;

  const int64_t C = 4, OC = 70;  // four input channels: the int8 GEMM path
  const Tensor cw = randn({OC, C, 3, 3}) * 0.3;
  nn::ConvOptions o;
  o.padding = {1, 1};
  o.stride = {1, 2};
  QuantizedConv2d conv(quantize_per_tensor(cw, 0.3 * 3.0 / 127.5, 0, QDtype::QInt8), randn({OC}), o, {0.04, 128},
                       {0.08, 60}, false, Int8ConvPath::kGemm);
  const Tensor images = randn({5, C, 11, 13}) * 3.0;  // 5 x 11 x 7 pixels: blocks end mid-row and mid-image

  set_num_threads(1);
  std::vector<Tensor> linear_rows, conv_images;
  for (int64_t i = 0; i < m; ++i) linear_rows.push_back(linear.forward(x[i].unsqueeze(0)));
  for (int64_t i = 0; i < images.size(0); ++i) conv_images.push_back(conv.forward(images[i].unsqueeze(0)));
  const Tensor want_linear = cat(linear_rows, 0), want_conv = cat(conv_images, 0);
  const Tensor want_dynamic = dynamic.forward(x), want_dynamic_onnx = dynamic_onnx.forward(x);
  for (const int threads : {1, 2, 3}) {
    set_num_threads(threads);
    SCOPED_TRACE(std::to_string(threads) + " thread(s)");
    EXPECT_TRUE(equal(linear.forward(x), want_linear));
    EXPECT_TRUE(equal(conv.forward(images), want_conv));
    EXPECT_TRUE(equal(dynamic.forward(x), want_dynamic));
    EXPECT_TRUE(equal(dynamic_onnx.forward(x), want_dynamic_onnx));
  }
}

TEST(QuantizedLayers, StaticModelRoundTripsThroughTheArchiveBitForBit) {
  const Tensor calibration = randn({4, 8, 1, 8, 8});
  auto model = CalibratedCnn(calibration);
  EXPECT_TRUE(is_quantized(*model));
  const Tensor x = randn({5, 1, 8, 8});
  NoGradGuard g;
  const Tensor want = model->forward(x);

  const std::string path = ScratchArchive("cnn");
  models::ModelInfo info;
  info.name = "cnn";
  info.precision = "int8";
  models::save_model_archive(path, *model, models::build_model(kCnnSpec).spec, info);
  // As any safetensors reader sees it: int8 weights with float32 scales, the rewrite described.
  const io::Safetensors file = io::load_safetensors(path);
  ASSERT_NE(file.find("0.weight"), nullptr);
  EXPECT_EQ(file.find("0.weight")->dtype(), kInt8);
  EXPECT_EQ(file.find("5.weight")->dtype(), kInt8);
  EXPECT_EQ(file.find("5.weight.scale")->dtype(), kFloat32);
  EXPECT_EQ(file.find("1.running_mean"), nullptr) << "the batch norm was folded into the convolution";
  EXPECT_THAT(file.metadata.at("anvil.quant"), HasSubstr(R"("1":{"kind":"identity"})"));

  const models::LoadedModel loaded = models::load_model_archive(path);
  EXPECT_EQ(loaded.info.precision, "int8");
  EXPECT_EQ(models::forward_dtype(loaded.info), kFloat32);
  EXPECT_TRUE(equal(loaded.built.module->forward(x), want));
  std::filesystem::remove(path);
}

TEST(QuantizedLayers, DynamicModelRoundTripsThroughTheArchive) {
  manual_seed(4);
  const std::string spec = models::preset_spec("mlp", {64}, 10);
  auto model = models::build_model(spec).module;
  model->eval();
  EXPECT_EQ(quantize_dynamic(*model).size(), 3u);
  const Tensor x = randn({7, 64});
  NoGradGuard g;
  const Tensor want = model->forward(x);
  const std::string path = ScratchArchive("mlp");
  models::save_model_archive(path, *model, spec, models::ModelInfo{.name = "mlp", .precision = "int8"});
  const models::LoadedModel loaded = models::load_model_archive(path);
  EXPECT_TRUE(equal(loaded.built.module->forward(x), want));
  std::filesystem::remove(path);
}

TEST(QuantizedLayers, ArchivesThatDoNotFitTheirSpecAreRefusedByName) {
  manual_seed(5);
  const std::string spec = models::preset_spec("mlp", {64}, 10);
  auto model = models::build_model(spec).module;
  model->eval();
  quantize_dynamic(*model);
  io::NamedTensors tensors;
  io::Metadata metadata;
  append_quantized_state(*model, &tensors, &metadata);
  const std::shared_ptr<nn::Module> fresh_model = models::build_model(spec).module;
  nn::Module& fresh = *fresh_model;
  io::Safetensors file{tensors, metadata};
  std::vector<std::string> consumed;
  EXPECT_THAT(ErrorOf([&] { apply_quantization(fresh, R"({"9": {"kind": "linear_dynamic"}})", file, &consumed); }),
              HasSubstr("1 of its layers name no layer of a Sequential in the model"));
  EXPECT_THAT(ErrorOf([&] { apply_quantization(fresh, R"({"1": {"kind": "linear_dynamic"}})", file, &consumed); }),
              HasSubstr("the spec has a ReLU there, not a Linear"));
  EXPECT_THAT(ErrorOf([&] { apply_quantization(fresh, R"({"0": {"kind": "lstm"}})", file, &consumed); }),
              HasSubstr("unknown kind \"lstm\""));
  EXPECT_THAT(ErrorOf([&] { apply_quantization(fresh, "[1, 2", file, &consumed); }),
              HasSubstr("bad quantization description"));
}

TEST(QuantizedLayers, RefusalsSayWhatWasExpected) {
  auto model = models::build_model(R"({"input_shape": [4], "layers": [{"type": "relu"}]})").module;
  model->eval();
  EXPECT_THAT(ErrorOf([&] { prepare(*model); }), HasSubstr("no Linear or Conv2d layer"));
  auto mlp = models::build_model(models::preset_spec("mlp", {64}, 10)).module;
  mlp->eval();
  prepare(*mlp);
  EXPECT_THAT(ErrorOf([&] { convert(*mlp); }), HasSubstr("observed no calibration batch"));
  auto training = models::build_model(kCnnSpec).module;
  EXPECT_THAT(ErrorOf([&] { fuse_modules(*training); }), HasSubstr("eval mode"));
  // Weights the int8 kernels cannot take.
  const QTensor affine = quantize_per_tensor(randn({3, 4}), 0.1, 5, QDtype::QInt8);
  EXPECT_THAT(ErrorOf([&] { QuantizedLinear(affine, Tensor(), {}, {}, false); }), HasSubstr("symmetric weights"));
  const QTensor u8 = quantize_per_tensor(randn({3, 4}), 0.1, 0, QDtype::QUInt8);
  EXPECT_THAT(ErrorOf([&] { DynamicQuantizedLinear(u8, Tensor(), true); }), HasSubstr("expected qint8 weights"));
  const QTensor w = quantize_per_tensor(randn({3, 4}), 0.1, 0, QDtype::QInt8);
  DynamicQuantizedLinear layer(w, Tensor(), true);
  EXPECT_THAT(ErrorOf([&] { layer.forward(randn({2, 5})); }), HasSubstr("last dimension is 4, got [2, 5]"));
  EXPECT_THAT(ErrorOf([&] {
                layer.forward(full({1, 4}, std::numeric_limits<double>::quiet_NaN()));
              }),
              HasSubstr("holds NaN"));
  EXPECT_THAT(ErrorOf([&] { layer.forward(ones({1, 4}, kInt64)); }), HasSubstr("expected a floating-point input"));
}

// A grouped convolution has no int8 version: it stays float, with the reason in the report,
// and the layers around it still quantize with their own observers.
// keep_float leaves the named layers in float32 (PyTorch's qconfig None), in both modes and
// inside residual blocks; a path that names no quantizable layer is refused with the ones that
// exist, before the model is touched.
TEST(QuantizedLayers, KeepFloatLeavesTheNamedLayersInFloat) {
  manual_seed(5);
  const std::string spec = models::preset_spec("resnet", {3, 8, 8}, 4);
  auto trained = models::build_model(spec).module;
  trained->eval();
  const Tensor x = randn({8, 3, 8, 8});
  const Tensor y = randint(0, 4, {8});
  auto set = std::make_shared<data::TensorDataset>(x, y);
  data::DataLoader calibration(set, {.batch_size = 4});
  data::DataLoader validation(set, {.batch_size = 4});
  PtqOptions all;
  all.max_accuracy_drop = 100;
  const PtqResult full =
      post_training_quantize(*trained, models::build_model(spec).module, calibration, validation, all);
  std::vector<std::string> paths;
  for (const LayerError& l : full.layers) paths.push_back(l.path);
  std::sort(paths.begin(), paths.end());
  ASSERT_GE(paths.size(), 3u);
  std::string nested;
  for (const std::string& p : paths)
    if (p.find('.') != std::string::npos) nested = p;
  ASSERT_FALSE(nested.empty()) << "no int8 layer inside a residual block";
  PtqOptions kept = all;
  kept.qconfig.keep_float = {nested, paths.front()};
  const PtqResult r = post_training_quantize(*trained, models::build_model(spec).module, calibration, validation, kept);
  EXPECT_EQ(r.layers.size(), full.layers.size() - 2);
  for (const LayerError& l : r.layers) {
    EXPECT_NE(l.path, nested);
    EXPECT_NE(l.path, paths.front());
  }
  EXPECT_TRUE(is_quantized(*r.model));
  // Dynamic: a Linear kept by its path.
  const std::string mlp = models::preset_spec("mlp", {3 * 8 * 8}, 4);
  auto float_mlp = models::build_model(mlp).module;
  auto dynamic = models::build_model(mlp).module;
  dynamic->load_state_dict(float_mlp->state_dict());
  QConfig q;
  const std::vector<std::string> every = quantize_dynamic(*models::build_model(mlp).module, q);
  ASSERT_GE(every.size(), 2u);
  q.keep_float = {every.front()};
  const std::vector<std::string> some = quantize_dynamic(*dynamic, q);
  EXPECT_EQ(some.size(), every.size() - 1);
  EXPECT_EQ(std::count(some.begin(), some.end(), every.front()), 0);
  // A path that is not a quantizable layer: refused, naming the ones there are, the model
  // untouched.
  auto untouched = models::build_model(mlp).module;
  q.keep_float = {"99"};
  EXPECT_THAT(ErrorOf([&] { quantize_dynamic(*untouched, q); }),
              HasSubstr("keep_float: \"99\" is not one of the model's Linear, LSTM and GRU layers (" + every.front()));
  EXPECT_FALSE(is_quantized(*untouched));
  QConfig all_kept;
  all_kept.keep_float = {every.begin(), every.end()};
  auto static_mlp = models::build_model(mlp).module;
  EXPECT_THAT(ErrorOf([&] { prepare(*static_mlp, all_kept); }), HasSubstr("every Linear and Conv2d layer is kept"));
}

TEST(QuantizedLayers, AGroupedConvolutionStaysFloatWithTheReason) {
  auto model = models::build_model(R"({"input_shape": [4, 6, 6], "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "groups": 2}, {"type": "relu"},
      {"type": "flatten"}, {"type": "linear", "out_features": 3}]})")
                   .module;
  model->eval();
  fuse_modules(*model);
  prepare(*model);
  NoGradGuard g;
  const Tensor x = randn({8, 4, 6, 6});
  const Tensor float_out = model->forward(x);
  const std::vector<ConvertedLayer> done = convert(*model);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].kind, "float");
  EXPECT_THAT(done[0].reason, HasSubstr("grouped convolution (groups=2) is not quantized"));
  EXPECT_EQ(done[1].kind, "QuantizedLinear");
  EXPECT_LT((model->forward(x) - float_out).abs().max().item<double>(), 0.1);
}

// Every preset quantizes, both ways, and stays close to its float model: layers that have no
// int8 version (embeddings, recurrent and attention layers, residual shortcuts) stay float, and
// the boundaries around them are placed automatically.
TEST(QuantizedLayers, EveryPresetQuantizesAndStaysCloseToFloat) {
  struct Preset {
    std::string name;
    IntArray shape;
    bool tokens;
  };
  for (const Preset& p :
       {Preset{"mlp", {20}, false}, Preset{"lenet5", {1, 16, 16}, false}, Preset{"resnet", {3, 16, 16}, false},
        Preset{"gru", {12}, true}, Preset{"transformer", {12}, true}}) {
    for (const PtqMode mode : {PtqMode::kStatic, PtqMode::kDynamic}) {
      manual_seed(11);
      const std::string spec = models::preset_spec(p.name, p.shape, 5, p.tokens ? 50 : 0);
      auto trained = models::build_model(spec).module;
      IntArray batch_shape{16};
      for (int64_t d : p.shape) batch_shape.push_back(d);
      const Tensor x = p.tokens ? randint(0, 50, batch_shape) : randn(batch_shape);
      const Tensor y = randint(0, 5, {16});
      auto set = std::make_shared<data::TensorDataset>(x, y);
      data::DataLoader calibration(set, {.batch_size = 8});
      data::DataLoader validation(set, {.batch_size = 8});
      PtqOptions o;
      o.mode = mode;
      o.max_accuracy_drop = 100;
      const PtqResult r =
          post_training_quantize(*trained, models::build_model(spec).module, calibration, validation, o);
      SCOPED_TRACE(p.name + " " + ptq_mode_name(mode));
      EXPECT_TRUE(is_quantized(*r.model));
      // Its weights are counted as the float model's: int8 matrices (the GRU's too) included.
      // Static quantization folds a BatchNorm into the convolution before it, as PyTorch's
      // fusion does: its scale and shift (2C) become the convolution's weight and a bias it
      // gains (C; the resnet preset's convolutions have none).
      int64_t folded = 0;
      if (mode == PtqMode::kStatic)
        for (const auto& [name, b] : trained->named_buffers())
          if (name.find("running_mean") != std::string::npos) folded += b.numel();
      EXPECT_EQ(parameter_count(*r.model), trained->num_parameters() - folded);
      // Every int8 layer has its error measured, those inside residual blocks too.
      if (mode == PtqMode::kStatic) {
        size_t int8_layers = 0;
        for (const ConvertedLayer& c : r.converted) int8_layers += c.kind != "float";
        EXPECT_EQ(r.layers.size(), int8_layers);
        for (const LayerError& l : r.layers) EXPECT_TRUE(std::isfinite(l.sqnr_db) || l.sqnr_db > 0) << l.path;
      }
      NoGradGuard g;
      const Tensor want = trained->forward(x), got = r.model->forward(x);
      ASSERT_EQ(got.sizes(), want.sizes());
      const double scale = want.abs().max().item<double>();
      EXPECT_LT((got - want).abs().max().item<double>(), 0.1 * scale + 1e-3);
      // And it round-trips through an archive.
      const std::string path = ScratchArchive(p.name);
      models::save_model_archive(path, *r.model, spec, models::ModelInfo{.name = p.name, .precision = "int8"});
      EXPECT_TRUE(equal(models::load_model_archive(path).built.module->forward(x), got));
      std::filesystem::remove(path);
    }
  }
}

bool HaveDigits() { return std::filesystem::exists(std::filesystem::path(test::DigitsDir()) / "digits.csv.gz"); }

struct DigitsData {
  std::shared_ptr<const data::Dataset> train, test;
};
DigitsData Digits(bool image) {
  auto digits = std::make_shared<data::MapDataset>(
      std::make_shared<data::Digits>(test::DigitsDir(), data::DigitsOptions{.as_image = image}),
      std::make_shared<data::Lambda>([](const Tensor& x) { return x / 16.0; }, "Scale"));
  auto split = data::random_split(digits, std::vector<double>{0.8, 0.2}, /*seed=*/0);
  return {split[0], split[1]};
}

// The issue's acceptance: static int8 within 1 point of float32 on the digits MLP and CNN,
// dynamic within half a point, the Linear weights at least 3.5x smaller in the archive.
TEST(QuantizedDigits, StaticWithinOnePointDynamicWithinHalfAPointWeightsSmaller) {
  if (!HaveDigits()) GTEST_SKIP() << "digits.csv.gz not in " << test::DigitsDir() << ": run `make data`";
  for (const std::string preset : {"mlp", "lenet5"}) {
    const bool image = preset != "mlp";
    const test::DigitsRun run = test::TrainDigitsPreset(preset, 20);
    const DigitsData d = Digits(image);
    const std::string spec = models::preset_spec(preset, image ? IntArray{1, 8, 8} : IntArray{64}, 10);
    for (const PtqMode mode : {PtqMode::kStatic, PtqMode::kDynamic}) {
      data::DataLoader calibration(d.train, {.batch_size = 64, .shuffle = true, .seed = 2});
      data::DataLoader validation(d.test, {.batch_size = 256});
      PtqOptions o;
      o.mode = mode;
      o.max_accuracy_drop = mode == PtqMode::kStatic ? 1.0 : 0.5;
      const PtqResult r =
          post_training_quantize(*run.model, models::build_model(spec).module, calibration, validation, o);
      std::printf("%s %s: %s\n", preset.c_str(), ptq_mode_name(mode), r.summary.c_str());
      ASSERT_TRUE(r.float_accuracy && r.int8_accuracy);
      EXPECT_NEAR(*r.float_accuracy, *run.test_accuracy, 1e-12) << "the same validation split";
      EXPECT_TRUE(r.passed) << preset << " " << ptq_mode_name(mode) << ": " << r.summary;
      EXPECT_GE(*r.float_accuracy, 0.95) << preset;
      RecordProperty(preset + "_" + ptq_mode_name(mode) + "_int8", std::to_string(*r.int8_accuracy));
      RecordProperty(preset + "_fp32", std::to_string(*r.float_accuracy));
      EXPECT_FALSE(r.layers.empty());
      // The archive's Linear weights: int8 plus 8 bytes of scale and zero point per row.
      io::NamedTensors tensors;
      io::Metadata metadata;
      append_quantized_state(*r.model, &tensors, &metadata);
      int64_t int8_bytes = 0, float_bytes = 0;
      for (const auto& [name, t] : tensors)
        if (name.find(".weight") != std::string::npos) int8_bytes += t.nbytes();
      for (const auto& [name, p] : run.model->named_parameters())
        if (name.find(".weight") != std::string::npos && p.dim() >= 2) float_bytes += p.nbytes();
      EXPECT_GE(static_cast<double>(float_bytes) / static_cast<double>(int8_bytes), 3.5)
          << preset << ": " << float_bytes << " float bytes, " << int8_bytes << " int8 bytes";
    }
  }
}

// The pitfall: a calibration set that does not look like what the model serves. On digits, one
// class alone is still representative (every class spans the same pixel range: measured, the
// int8 accuracy stays within 0.3 points of float32 for each of the ten classes, mlp and
// lenet5, histogram and minmax observers); a calibration set with other preprocessing is not:
// raw pixels in [0, 16] where the model serves [0, 1] give the input a 16x too coarse scale,
// accuracy collapses, and the gate refuses the model, naming both accuracies and the worst
// layer.
TEST(QuantizedDigits, AnUnrepresentativeCalibrationSetTripsTheGate) {
  if (!HaveDigits()) GTEST_SKIP() << "digits.csv.gz not in " << test::DigitsDir() << ": run `make data`";
  const test::DigitsRun run = test::TrainDigitsPreset("lenet5", 20);
  const DigitsData d = Digits(true);
  for (const bool one_class : {true, false}) {
    std::shared_ptr<const data::Dataset> calibration_set;
    if (one_class) {
      std::vector<Tensor> xs;
      for (int64_t i = 0; i < d.train->size(); ++i) {
        data::Example e = d.train->get(i);
        if (e["target"].item<int64_t>() == 0) xs.push_back(e["input"]);
      }
      ASSERT_GT(xs.size(), 20u);
      calibration_set =
          std::make_shared<data::TensorDataset>(stack(xs), zeros({static_cast<int64_t>(xs.size())}, kInt64));
    } else {
      calibration_set =
          data::random_split(std::make_shared<data::Digits>(test::DigitsDir(), data::DigitsOptions{.as_image = true}),
                             std::vector<double>{0.8, 0.2}, /*seed=*/0)[0];
    }
    data::DataLoader calibration(calibration_set, {.batch_size = 64});
    data::DataLoader validation(d.test, {.batch_size = 256});
    PtqOptions o;
    o.mode = PtqMode::kStatic;
    const PtqResult r =
        post_training_quantize(*run.model, models::build_model(models::preset_spec("lenet5", {1, 8, 8}, 10)).module,
                               calibration, validation, o);
    std::printf("%s: %s\n", one_class ? "one class" : "raw pixels", r.summary.c_str());
    if (one_class) {
      EXPECT_TRUE(r.passed) << r.summary;
      continue;
    }
    EXPECT_FALSE(r.passed);
    EXPECT_THAT(r.summary, HasSubstr("not registered for serving"));
    EXPECT_THAT(r.summary, HasSubstr("The worst quantized layer is "));
    EXPECT_THAT(r.summary, HasSubstr(" dB): "));
    EXPECT_THAT(r.summary,
                HasSubstr("keep it in float (keep_float \"3\"), or calibrate on more representative batches"));
    EXPECT_GT(*r.float_accuracy - *r.int8_accuracy, 0.01);
  }
}

}  // namespace
}  // namespace anvil::quant
