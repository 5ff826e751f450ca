// Autocast (core/amp/autocast.h): each policy class on representative ops (the outputs' and the
// gradients' dtypes), the cast cache, nesting, disabling inside, no_grad, and the device type.
#include "core/amp/autocast.h"

#include <gtest/gtest.h>

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
