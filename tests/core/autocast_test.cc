// Autocast (core/amp/autocast.h): each policy class on representative ops (the outputs' and the
// gradients' dtypes), the cast cache, nesting, disabling inside, no_grad, and the device type.
#include "core/amp/autocast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/anvil.h"

namespace anvil {
namespace {

TEST(Autocast, LowerPrecisionRowsRunInTheRegionsDtype) {
  const Tensor a = randn({4, 8}), b = randn({8, 3}), w = randn({5, 8}), bias = randn({5});
  {
    AutocastGuard amp(DeviceType::CPU);
    EXPECT_TRUE(autocast::is_enabled(DeviceType::CPU));
    EXPECT_EQ(mm(a, b).dtype(), kBFloat16);
    EXPECT_EQ(linear(a, w, bias).dtype(), kBFloat16);
    EXPECT_EQ(matmul(a, b).dtype(), kBFloat16);
  }
  EXPECT_FALSE(autocast::is_enabled(DeviceType::CPU));
  EXPECT_EQ(mm(a, b).dtype(), kFloat32);
  {
    AutocastGuard amp(DeviceType::CPU, kFloat16);
    EXPECT_EQ(mm(a, b).dtype(), kFloat16);
  }
}

// A bfloat16 activation into a float32 weight is autocast's normal case: the products check
// their operands after the casts, as PyTorch's autocast runs before its ops' checks. Outside a
// region the same mix is still a dtype error.
TEST(Autocast, LowPrecisionActivationsMeetFloat32WeightsInsideARegion) {
  const Tensor x = randn({4, 8}).to(kBFloat16), w = randn({5, 8}), bias = randn({5}), m = randn({8, 3});
  {
    AutocastGuard amp(DeviceType::CPU);
    EXPECT_EQ(linear(x, w, bias).dtype(), kBFloat16);
    EXPECT_EQ(linear_relu(x, w, bias).dtype(), kBFloat16);
    EXPECT_EQ(mm(x, m).dtype(), kBFloat16);
    EXPECT_EQ(bmm(x.unsqueeze(0), m.unsqueeze(0)).dtype(), kBFloat16);
    // Two fused Linear + ReLU layers in a row (nn::Sequential's fusion): the second takes the
    // first's bfloat16 output.
    const Tensor w2 = randn({6, 5}), b2 = randn({6});
    EXPECT_EQ(linear_relu(linear_relu(randn({4, 8}), w, bias), w2, b2).dtype(), kBFloat16);
  }
  EXPECT_THROW(linear(x, w, bias), TypeError);
  EXPECT_THROW(mm(x, m), TypeError);
}

// AMP anomaly detection: the first non-finite float16 output inside a region names the op, the
// dtype and the inputs' ranges; without the guard, or outside a region, nothing is checked.
TEST(Autocast, AnomalyDetectionNamesTheOpTheDtypeAndTheInputRanges) {
  const Tensor a = full({2, 300}, 20.0), b = full({300, 3}, 20.0);  // each product 120000 > 65504
  {
    AutocastGuard amp(DeviceType::CPU, kFloat16);
    const Tensor silent = mm(a, b);  // no guard: the overflow goes on as inf
    EXPECT_FALSE(isfinite(silent.to(kFloat32)).any().item<bool>());
    autocast::AnomalyGuard anomaly;
    try {
      (void)mm(a, b);
      ADD_FAILURE() << "no anomaly reported";
    } catch (const autocast::AmpAnomalyError& e) {
      const std::string m = e.what();
      for (const char* want :
           {"AMP anomaly: mm produced inf", "float16 output [2, 3]", "input 0: float16 [2, 300] in [20, 20]",
            "input 1: float16 [300, 3] in [20, 20]", "\"autocast\": false"}) {
        EXPECT_NE(m.find(want), std::string::npos) << want << " not in: " << m;
      }
    }
    EXPECT_NO_THROW((void)mm(a / 100.0, b));  // finite: passes
    {
      autocast::AnomalyGuard off(false);
      EXPECT_NO_THROW((void)mm(a, b));
    }
    // A NaN input is reported as coming from upstream.
    const Tensor bad = full({2, 300}, std::nan(""));
    try {
      (void)mm(bad, b);
      ADD_FAILURE() << "no anomaly reported";
    } catch (const autocast::AmpAnomalyError& e) {
      EXPECT_NE(std::string(e.what()).find("produced NaN"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("already not finite"), std::string::npos) << e.what();
    }
  }
  autocast::AnomalyGuard anomaly;  // outside a region: float16 ops the user runs are not checked
  EXPECT_NO_THROW((void)mm(a.to(kFloat16), b.to(kFloat16)));
}

TEST(Autocast, PrecisionNamesMapToDtypes) {
  EXPECT_EQ(autocast::precision_dtype("fp32"), kFloat32);
  EXPECT_EQ(autocast::precision_dtype("bf16"), kBFloat16);
  EXPECT_EQ(autocast::precision_dtype("fp16"), kFloat16);
  try {
    (void)autocast::precision_dtype("fp8");
    ADD_FAILURE() << "fp8 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected \"fp32\", \"bf16\" or \"fp16\", got \"fp8\""), std::string::npos)
        << e.what();
  }
}

TEST(Autocast, Float32RowsLiftLowPrecisionInputs) {
  AutocastGuard amp(DeviceType::CPU);
  const Tensor y = mm(randn({4, 8}), randn({8, 3}));  // bfloat16
  ASSERT_EQ(y.dtype(), kBFloat16);
  EXPECT_EQ(softmax(y, 1).dtype(), kFloat32);
  EXPECT_EQ(log_softmax(y, 1).dtype(), kFloat32);
  EXPECT_EQ(exp(y).dtype(), kFloat32);
  EXPECT_EQ(y.sum().dtype(), kFloat32);
  EXPECT_EQ(y.pow(2.0).dtype(), kFloat32);
}

TEST(Autocast, WidestRowsPromoteAndTheRestRunAsTheyCome) {
  AutocastGuard amp(DeviceType::CPU);
  const Tensor low = randn({2, 3}).to(kBFloat16), high = randn({2, 3});
  EXPECT_EQ(cat({low, high}, 0).dtype(), kFloat32);  // Widest
  EXPECT_EQ(relu(low).dtype(), kBFloat16);           // NoCast
  EXPECT_EQ((low + high).dtype(), kFloat32);         // NoCast: the usual promotion
}

TEST(Autocast, GradientsReachFloat32LeavesInFloat32) {
  const Tensor w = randn({5, 8}).requires_grad_(), bias = zeros({5}).requires_grad_();
  const Tensor x = randn({4, 8});
  Tensor loss;
  {
    AutocastGuard amp(DeviceType::CPU);
    const Tensor y = linear(x, w, bias);
    ASSERT_EQ(y.dtype(), kBFloat16);
    loss = y.to(kFloat32).pow(2.0).mean();
  }
  loss.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  EXPECT_EQ(bias.grad().dtype(), kFloat32);
  // Against the float32 computation: bfloat16 has 8 bits of mantissa.
  const Tensor w2 = w.detach().clone().requires_grad_();
  linear(x, w2, bias.detach()).pow(2.0).mean().backward();
  EXPECT_TRUE(allclose(w.grad(), w2.grad(), 5e-2, 5e-2));
}

TEST(Autocast, AWeightIsCastOncePerRegion) {
  // A layer's weight and bias (leaves that require grad) used three times: two casts, four hits.
  Tensor w = randn({5, 8}).requires_grad_();
  const Tensor b = zeros({5}).requires_grad_();
  {
    AutocastGuard amp(DeviceType::CPU);
    linear(randn({4, 8}), w, b);
    linear(randn({2, 8}), w, b);
    linear(randn({3, 8}), w, b);
    const autocast::CacheStats s = autocast::cache_stats();
    EXPECT_EQ(s.misses, 2);
    EXPECT_EQ(s.hits, 4);
    EXPECT_EQ(s.entries, 2);
    {
      AutocastGuard inner(DeviceType::CPU);  // nested: the same cache
      linear(randn({1, 8}), w, b);
      EXPECT_EQ(autocast::cache_stats().hits, 6);
    }
    EXPECT_EQ(autocast::cache_stats().entries, 2);  // still the outer region's
    // A weight changed in place is cast again.
    {
      NoGradGuard no_grad;
      w.add_(1.0);
    }
    linear(randn({1, 8}), w, b);
    EXPECT_EQ(autocast::cache_stats().misses, 3);
  }
  EXPECT_EQ(autocast::cache_stats().entries, 0);  // the region ended
}

TEST(Autocast, NestingDisablingAndNoGrad) {
  const Tensor a = randn({2, 4}), b = randn({4, 2});
  AutocastGuard amp(DeviceType::CPU);
  {
    AutocastGuard off(DeviceType::CPU, {}, /*enabled=*/false);
    EXPECT_EQ(mm(a, b).dtype(), kFloat32);
  }
  EXPECT_EQ(mm(a, b).dtype(), kBFloat16);
  {
    NoGradGuard no_grad;  // autocast still applies; nothing is cached without grad
    const Tensor w = randn({3, 4}).requires_grad_();
    EXPECT_EQ(linear(a, w).dtype(), kBFloat16);
    EXPECT_EQ(autocast::cache_stats().entries, 0);
  }
  // A CUDA region does not touch CPU ops.
  AutocastGuard cuda(DeviceType::CUDA, {}, /*enabled=*/false);
  {
    AutocastGuard cpu_off(DeviceType::CPU, {}, false);
    AutocastGuard cuda_on(DeviceType::CUDA);
    EXPECT_EQ(mm(a, b).dtype(), kFloat32);
  }
}

TEST(Autocast, OnlyLowPrecisionDtypesAreRegions) {
  EXPECT_THROW(AutocastGuard(DeviceType::CPU, kFloat32), Error);
  EXPECT_FALSE(autocast::is_enabled(DeviceType::CPU));
}

}  // namespace
}  // namespace anvil
