// The static int8 Linear on a CUDA device (core/backend/cuda/int8_linear.h): cuBLASLt's int8
// product between two kernels that run the CPU's element formulas, so the GPU gives the CPU's
// bits. The first test runs everywhere: it computes the device path's arithmetic on the host
// (uint8 activations shifted to signed bytes, the signed product, the column constants of
// requant_columns) and checks it against the CPU layer. The others need a GPU and skip
// without one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/anvil.h"
#include "core/backend/registry.h"
#include "core/nn/nn.h"
#include "core/quant/int8_elements.h"
#include "core/quant/quantize.h"
#include "core/quant/quantized_layers.h"
#include "core/quant/requantize.h"

namespace anvil::quant {
namespace {

struct LinearCase {
  int64_t m, k, n;
  bool per_channel, bias, relu;
};

std::string Name(const LinearCase& c) {
  return "m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) + " n=" + std::to_string(c.n) +
         (c.per_channel ? " per-channel" : " per-tensor") + (c.bias ? " bias" : "") + (c.relu ? " relu" : "");
}

// Odd sizes (k and n not multiples of 4: the device pads both), one row, a batch, per-tensor
// and per-channel weights, with and without bias and ReLU.
const std::vector<LinearCase>& Cases() {
  static const std::vector<LinearCase> cases = {
      {1, 20, 10, true, true, false},       {7, 33, 17, true, true, true}, {64, 64, 32, false, true, false},
      {256, 1024, 1024, true, true, false}, {5, 3, 1, false, false, true}, {33, 129, 65, true, false, false},
  };
  return cases;
}

// A layer with the weight, bias and activation parameters a calibration of x would give,
// and an input that falls partly outside the input range (clamped).
std::shared_ptr<QuantizedLinear> MakeLayer(const LinearCase& c) {
  const Tensor w = randn({c.n, c.k}) * 0.2;
  const Tensor b = c.bias ? randn({c.n}) : Tensor();
  return std::make_shared<QuantizedLinear>(quantize_weight(w, c.per_channel), b, ActivationQParams{2.0 / 255, 128},
                                           ActivationQParams{0.05, 100}, c.relu);
}

// A case's layer, input and the CPU layer's output on it.
struct CpuRun {
  std::shared_ptr<QuantizedLinear> layer;
  Tensor x, want;
};
CpuRun RunOnCpu(const LinearCase& c) {
  manual_seed(3);
  auto layer = MakeLayer(c);
  const Tensor x = randn({c.m, c.k}) * 1.5;
  NoGradGuard g;
  return {layer, x, layer->forward(x)};
}

TEST(QuantizedLayers, TheGpuPathsArithmeticComputedOnTheHostGivesTheCpuBits) {
  for (const LinearCase& c : Cases()) {
    SCOPED_TRACE(Name(c));
    const CpuRun run = RunOnCpu(c);
    const auto& [layer, x, want] = run;
    NoGradGuard g;

    const QTensor& qw = layer->qweight();
    const Tensor w = qw.data.to(kInt32);
    std::vector<int32_t> row_sums(static_cast<size_t>(c.n));
    for (int64_t j = 0; j < c.n; ++j) row_sums[static_cast<size_t>(j)] = w[j].sum().item<int32_t>();
    std::vector<float> w_scales;
    for (double s : qw.scales.to_vector<double>()) w_scales.push_back(static_cast<float>(s));
    const ActivationQParams in = layer->input_qparams(), out = layer->output_qparams();
    const RequantConstants k = requant_constants(static_cast<float>(in.scale), w_scales.data(), c.per_channel, c.n,
                                                 static_cast<float>(out.scale));
    const Tensor bias = layer->float_bias();
    const GemmEpilogue e{row_sums.data(), w_scales.data(), c.per_channel,
                         bias.defined() ? bias.data_ptr<float>() : nullptr, c.relu};
    const RequantColumns columns = requant_columns(e, k, c.n);
    ASSERT_EQ(columns.multiplier.size(), static_cast<size_t>(c.n));
    ASSERT_EQ(columns.bias_term.size(), c.bias ? static_cast<size_t>(c.n) : 0u);

    // The device path: signed bytes q - 128, their exact product, the zero point shifted alike.
    const float inv = 1.0f / static_cast<float>(in.scale);
    const std::vector<float> xs = x.contiguous().to_vector<float>();
    const std::vector<int32_t> ws = w.contiguous().to_vector<int32_t>();
    std::vector<int32_t> a(xs.size());
    for (size_t i = 0; i < xs.size(); ++i)
      a[i] = static_cast<int8_t>(element::QuantizeToUint8(xs[i], inv, static_cast<float>(in.zero_point)) - 128);
    const int32_t shifted_zp = static_cast<int32_t>(in.zero_point) - 128, out_zp = static_cast<int32_t>(out.zero_point);
    std::vector<float> got(static_cast<size_t>(c.m * c.n));
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        int32_t acc = 0;
        for (int64_t t = 0; t < c.k; ++t)
          acc += a[static_cast<size_t>(i * c.k + t)] * ws[static_cast<size_t>(j * c.k + t)];
        const int32_t raw = element::Compensated(acc, shifted_zp, row_sums[static_cast<size_t>(j)]);
        const int32_t q = element::RequantizeToUint8(
            static_cast<float>(raw), c.bias ? &columns.bias_term[static_cast<size_t>(j)] : nullptr,
            columns.multiplier[static_cast<size_t>(j)], out_zp, c.relu ? out_zp : 0);
        got[static_cast<size_t>(i * c.n + j)] = element::DequantizeUint8(q, out_zp, static_cast<float>(out.scale));
      }
    EXPECT_TRUE(equal(tensor(got, IntArray{c.m, c.n}), want));
  }
}

#if ANVIL_WITH_CUDA
TEST(CudaInt8, StaticLinearGivesTheCpuBitsThroughCublasLt) {
  if (!cuda_is_available()) GTEST_SKIP() << "no usable CUDA device: " << cuda_unavailable_reason();
  for (const LinearCase& c : Cases()) {
    SCOPED_TRACE(Name(c));
    const CpuRun run = RunOnCpu(c);
    const auto& [layer, x, want] = run;
    NoGradGuard g;
    const Tensor got = layer->forward(x.to(CUDA(0)));
    EXPECT_EQ(got.device(), CUDA(0));
    EXPECT_STREQ(layer->cuda_path(), "cublaslt-int8");
    EXPECT_TRUE(equal(got.cpu(), want)) << "max |difference| " << (got.cpu() - want).abs().max().item<double>();
    // A batch of rows shaped [2, m, k] is the same rows.
    const Tensor batched = layer->forward(x.unsqueeze(0).expand({2, c.m, c.k}).contiguous().to(CUDA(0)));
    EXPECT_TRUE(equal(batched.cpu()[1], want));
  }
}

TEST(CudaInt8, AStaticallyQuantizedMlpServesOnTheGpuWithTheCpuOutputs) {
  if (!cuda_is_available()) GTEST_SKIP() << "no usable CUDA device: " << cuda_unavailable_reason();
  manual_seed(4);
  auto quantized = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(64, 128), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
  quantized->eval();
  fuse_modules(*quantized);
  ASSERT_EQ(prepare(*quantized), 2);
  {
    NoGradGuard g;
    for (int i = 0; i < 8; ++i) quantized->forward(randn({32, 64}));
  }
  ASSERT_EQ(convert(*quantized).size(), 2u);
  const Tensor x = randn({48, 64});
  NoGradGuard g;
  const Tensor want = quantized->forward(x);
  quantized->to(CUDA(0));
  const Tensor got = quantized->forward(x.to(CUDA(0)));
  EXPECT_TRUE(equal(got.cpu(), want));
}

TEST(CudaInt8, DynamicLinearRunsDequantizeComputeAndSaysSo) {
  if (!cuda_is_available()) GTEST_SKIP() << "no usable CUDA device: " << cuda_unavailable_reason();
  manual_seed(6);
  const Tensor w = randn({16, 24}) * 0.2, b = randn({16});
  DynamicQuantizedLinear layer(quantize_weight(w, true), b, /*reduce_range=*/false, DynamicActivations::kPyTorch);
  const Tensor x = randn({9, 24});
  NoGradGuard g;
  // Dequantize-compute: the float layer with the int8 weights dequantized.
  const Tensor want = linear(x, dequantize(layer.qweight()), b);
  const Tensor got = layer.forward(x.to(CUDA(0)));
  EXPECT_EQ(got.device(), CUDA(0));
  EXPECT_LT((got.cpu() - want).abs().max().item<double>(), 1e-5);
}
#endif

}  // namespace
}  // namespace anvil::quant
