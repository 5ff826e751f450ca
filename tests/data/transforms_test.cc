// Data-pipeline transforms (torchvision.transforms semantics): ToTensor's uint8-only /255,
// per-channel Normalize and BandScale, flips and crops, reproducibility of the random ones
// per (seed, call index), composition order and errors. Reference values are hand-computed
// from the definitions.
#include "core/data/transforms.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/functions.h"
#include "core/tensor/random.h"
#include "core/util/error.h"
#include "tests/core/test_util.h"

using namespace anvil;
using namespace anvil::data;
using ::testing::AllOf;
using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Pointwise;

using namespace anvil::test;

namespace {

// ---- ToTensor ----

TEST(ToTensor, Uint8HwcBecomesChwDividedBy255) {
  // v[h][w][c] = 100c + 10h + w, stored HWC.
  std::vector<uint8_t> hwc = {0, 100, 200, 1, 101, 201, 10, 110, 210, 11, 111, 211};
  Tensor y = ToTensor()(tensor(hwc, IntArray{2, 2, 3}));
  EXPECT_EQ(y.dtype(), kFloat32);
  EXPECT_EQ(y.sizes(), (IntArray{3, 2, 2}));
  EXPECT_TRUE(y.is_contiguous());
  std::vector<double> want = {0, 1, 10, 11, 100, 101, 110, 111, 200, 201, 210, 211};
  for (double& w : want) w /= 255.0;
  EXPECT_THAT(Vals(y), Pointwise(DoubleNear(1e-6), want));
}

TEST(ToTensor, Uint8MaxBecomesOneAndHwGetsOneChannel) {
  Tensor y = ToTensor()(tensor(std::vector<uint8_t>{0, 255, 51}, IntArray{1, 3}));
  EXPECT_EQ(y.sizes(), (IntArray{1, 1, 3}));
  EXPECT_THAT(Vals(y), Pointwise(DoubleNear(1e-7), std::vector<double>{0.0, 1.0, 0.2}));
}

TEST(ToTensor, Int32BandsKeepTheirValues) {
  // A 1x2 image with 2 bands of 12-bit-ish sensor values: no /255.
  std::vector<int32_t> hwc = {4000, 12, 65535, -3};
  Tensor y = ToTensor()(tensor(hwc, IntArray{1, 2, 2}));
  EXPECT_EQ(y.dtype(), kFloat32);
  EXPECT_EQ(y.sizes(), (IntArray{2, 1, 2}));
  EXPECT_THAT(Vals(y), ElementsAre(4000.0, 65535.0, 12.0, -3.0));
}

TEST(ToTensor, Int16AndFloatKeepTheirValues) {
  Tensor a = ToTensor()(tensor(std::vector<int32_t>{4000, 255}, IntArray{2, 1}).to(kInt16));
  EXPECT_THAT(Vals(a), ElementsAre(4000.0, 255.0));
  Tensor b = ToTensor()(tensor(std::vector<float>{0.7f, 1.5f}, IntArray{1, 1, 2}));
  EXPECT_EQ(b.dtype(), kFloat32);
  EXPECT_THAT(Vals(b), ElementsAre(static_cast<double>(0.7f), 1.5));
  Tensor c = ToTensor()(tensor(std::vector<double>{0.7}, IntArray{1, 1}));
  EXPECT_EQ(c.dtype(), kFloat32);
  EXPECT_THAT(Vals(c), ElementsAre(static_cast<double>(0.7f)));
}

TEST(ToTensor, DoesNotAliasFloatInput) {
  Tensor x = tensor(std::vector<float>{1, 2}, IntArray{1, 2});
  Tensor y = ToTensor()(x);
  x.data_ptr<float>()[0] = 9;
  EXPECT_THAT(Vals(y), ElementsAre(1.0, 2.0));
}

TEST(ToTensor, RejectsWrongRank) {
  EXPECT_THAT(ErrorOf([] { ToTensor()(zeros({2})); }), HasSubstr("HW or HWC"));
}

// ---- Normalize ----

TEST(Normalize, PerChannelOnChw) {
  // C=2, H=1, W=2: channel 0 = [1, 2], channel 1 = [3, 4].
  Tensor x = tensor(std::vector<float>{1, 2, 3, 4}, IntArray{2, 1, 2});
  Tensor y = Normalize({1, 2}, {2, 0.5})(x);
  EXPECT_EQ(y.sizes(), (IntArray{2, 1, 2}));
  EXPECT_THAT(Vals(y), ElementsAre(0.0, 0.5, 2.0, 4.0));
}

TEST(Normalize, PerChannelOnNchw) {
  Tensor x = tensor(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, IntArray{2, 2, 1, 2});
  Tensor y = Normalize({1, 2}, {2, 0.5})(x);
  EXPECT_EQ(y.sizes(), (IntArray{2, 2, 1, 2}));
  // Sample 1: channel 0 = [5, 6] -> [2, 2.5]; channel 1 = [7, 8] -> [10, 12].
  EXPECT_THAT(Vals(y), ElementsAre(0.0, 0.5, 2.0, 4.0, 2.0, 2.5, 10.0, 12.0));
}

TEST(Normalize, Errors) {
  EXPECT_THAT(ErrorOf([] {
                Normalize({0, 0}, {1, 1})(zeros({3, 2, 2}));
              }),
              AllOf(HasSubstr("expected 2 channels"), HasSubstr("got 3")));
  EXPECT_THAT(ErrorOf([] { Normalize({0, 0}, {1, 0}); }), HasSubstr("std[1] is zero"));
  EXPECT_THAT(ErrorOf([] { Normalize({0, 0}, {1}); }), HasSubstr("same length"));
  EXPECT_THAT(ErrorOf([] { Normalize({0}, {1})(zeros({1, 2})); }), HasSubstr("CHW or NCHW"));
  EXPECT_THAT(ErrorOf([] { Normalize({0}, {1})(zeros({1, 1, 1}, kInt32)); }), HasSubstr("floating-point"));
}

// ---- BandScale ----

TEST(BandScale, PerBandAffineOnIntegerBands) {
  Tensor x = tensor(std::vector<int32_t>{4000, 2000, 10, 20}, IntArray{2, 1, 2});
  Tensor y = BandScale({1e-4, 2}, {0, -1})(x);
  EXPECT_EQ(y.dtype(), kFloat32);
  EXPECT_THAT(Vals(y), Pointwise(DoubleNear(1e-6), std::vector<double>{0.4, 0.2, 19, 39}));
}

TEST(BandScale, BatchedAndErrors) {
  Tensor x = tensor(std::vector<double>{1, 2, 3, 4}, IntArray{2, 2, 1, 1});
  Tensor y = BandScale({10, 100}, {1, 0})(x);
  EXPECT_EQ(y.dtype(), kFloat64);
  EXPECT_THAT(Vals(y), ElementsAre(11.0, 200.0, 31.0, 400.0));
  EXPECT_THAT(ErrorOf([] {
                BandScale({1, 1}, {0, 0})(zeros({3, 1, 1}));
              }),
              AllOf(HasSubstr("expected 2 bands"), HasSubstr("got 3")));
  EXPECT_THAT(ErrorOf([] { BandScale({1, 1}, {0}); }), HasSubstr("same length"));
}

// ---- RandomHorizontalFlip ----

TEST(RandomHorizontalFlip, AlwaysAndNever) {
  // 2x3x3 uint8 CHW image, v = 9c + 3h + w.
  std::vector<uint8_t> v;
  for (uint8_t i = 0; i < 18; ++i) v.push_back(i);
  Tensor x = tensor(v, IntArray{2, 3, 3});
  Tensor f = RandomHorizontalFlip(1.0)(x);
  EXPECT_EQ(f.dtype(), kUInt8);
  EXPECT_EQ(f.sizes(), (IntArray{2, 3, 3}));
  EXPECT_THAT(Vals(f), ElementsAre(2, 1, 0, 5, 4, 3, 8, 7, 6, 11, 10, 9, 14, 13, 12, 17, 16, 15));
  EXPECT_THAT(Vals(RandomHorizontalFlip(0.0)(x)), ElementsAreArray(Vals(x)));
}

TEST(RandomHorizontalFlip, DrawIsPureFunctionOfSeedAndCallIndex) {
  Tensor x = tensor(std::vector<float>{0, 1}, IntArray{1, 1, 2});
  RandomHorizontalFlip t(0.5, 7);
  std::vector<bool> got;
  for (uint64_t i = 0; i < 64; ++i) {
    got.push_back(Vals(t(x))[0] == 1.0);
    // The documented draw: flip iff the first Philox word of (seed, i), as a [0,1) uniform, < p.
    const bool want = philox4x32(7, i)[0] * (1.0 / 4294967296.0) < 0.5;
    EXPECT_EQ(got.back(), want) << "call " << i;
  }
  EXPECT_EQ(t.call_index(), 64u);
  EXPECT_NE(std::set<bool>(got.begin(), got.end()).size(), 1u);  // both outcomes occur
  t.set_seed(7);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(Vals(t(x))[0] == 1.0, got[i]);
  t.set_call_index(40);
  EXPECT_EQ(Vals(t(x))[0] == 1.0, got[40]);
  EXPECT_THAT(ErrorOf([] { RandomHorizontalFlip(1.5); }), HasSubstr("p in [0, 1]"));
}

// ---- CenterCrop ----

TEST(CenterCrop, EvenAndOddMargins) {
  Tensor x = Iota({1, 4, 4});
  EXPECT_THAT(Vals(CenterCrop(2, 2)(x)), ElementsAre(5, 6, 9, 10));
  // Margin 1: round(0.5) = 0, so the window starts at 0.
  EXPECT_THAT(Vals(CenterCrop(2, 2)(Iota({1, 3, 3}))), ElementsAre(0, 1, 3, 4));
  // Margin 3 in H: round(1.5) = 2 -> rows 2, 3.
  Tensor c = CenterCrop(2, 1)(Iota({1, 5, 1}));
  EXPECT_EQ(c.sizes(), (IntArray{1, 2, 1}));
  EXPECT_THAT(Vals(c), ElementsAre(2, 3));
  EXPECT_TRUE(CenterCrop(2, 2)(x).is_contiguous());
  EXPECT_THAT(ErrorOf([&] { CenterCrop(5, 2)(x); }), HasSubstr("does not fit"));
}

// ---- RandomCrop ----

TEST(RandomCrop, WindowIsPureFunctionOfSeedAndCallIndex) {
  Tensor x = Iota({1, 3, 3});
  RandomCrop t(2, 2, 0, 11);
  std::set<std::pair<int64_t, int64_t>> seen;
  for (uint64_t i = 0; i < 64; ++i) {
    const auto r = philox4x32(11, i);
    const int64_t top = static_cast<int64_t>(((uint64_t{r[0]} << 32) | r[1]) % 2);
    const int64_t left = static_cast<int64_t>(((uint64_t{r[2]} << 32) | r[3]) % 2);
    seen.insert({top, left});
    const double a = 3.0 * top + left;
    EXPECT_THAT(Vals(t(x)), ElementsAre(a, a + 1, a + 3, a + 4)) << "call " << i;
  }
  EXPECT_EQ(seen.size(), 4u);  // every window position occurs
}

TEST(RandomCrop, ZeroPadding) {
  Tensor x = tensor(std::vector<float>{1, 2, 3, 4}, IntArray{1, 2, 2});
  // A 4x4 crop of the 4x4 padded image has only one position.
  Tensor y = RandomCrop(4, 4, 1, 3)(x);
  EXPECT_EQ(y.sizes(), (IntArray{1, 4, 4}));
  EXPECT_THAT(Vals(y), ElementsAre(0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0, 0, 0, 0));
  // 1x1 crops of the padded image only ever see padding or pixels.
  RandomCrop small(1, 1, 1, 5);
  std::set<double> vals;
  for (int i = 0; i < 200; ++i) vals.insert(Vals(small(x))[0]);
  EXPECT_EQ(vals, (std::set<double>{0, 1, 2, 3, 4}));
  EXPECT_THAT(ErrorOf([&] { RandomCrop(5, 5, 1)(x); }), HasSubstr("does not fit"));
  EXPECT_THAT(ErrorOf([] { RandomCrop(1, 1, -1); }), HasSubstr("non-negative padding"));
}

// ---- Compose / Lambda ----

TEST(Compose, AppliesInOrder) {
  auto add1 = std::make_shared<Lambda>([](const Tensor& t) { return t + 1.0; }, "add1");
  auto mul2 = std::make_shared<Lambda>([](const Tensor& t) { return t * 2.0; }, "mul2");
  Tensor x = tensor({1.0});
  EXPECT_THAT(Vals(Compose({add1, mul2})(x)), ElementsAre(4.0));  // (1 + 1) * 2
  EXPECT_THAT(Vals(Compose({mul2, add1})(x)), ElementsAre(3.0));  // 1 * 2 + 1
  EXPECT_EQ(Compose({add1, mul2}).name(), "Compose(add1, mul2)");
  EXPECT_THAT(Vals(Compose({})(x)), ElementsAre(1.0));
  EXPECT_THAT(ErrorOf([&] { Compose({add1, nullptr}); }), HasSubstr("transform 1 is null"));
}

TEST(Compose, ToTensorThenNormalize) {
  std::vector<uint8_t> hwc = {0, 255, 51, 102};  // H=1, W=2, C=2
  Compose pipe({std::make_shared<ToTensor>(),
                std::make_shared<Normalize>(std::vector<double>{0.5, 0.5}, std::vector<double>{0.5, 0.25})});
  Tensor y = pipe(tensor(hwc, IntArray{1, 2, 2}));
  // Channel 0 = [0, 0.2] -> [-1, -0.6]; channel 1 = [1, 0.4] -> [2, -0.4].
  EXPECT_THAT(Vals(y), Pointwise(DoubleNear(1e-6), std::vector<double>{-1, -0.6, 2, -0.4}));
}

// ---- Resize ----

// Bilinear resize in float64 written from the definition (half-pixel centres, clamp at 0).
std::vector<double> ReferenceResize(const std::vector<double>& in, int64_t H, int64_t W, int64_t h, int64_t w) {
  auto coord = [](int64_t o, int64_t n_in, int64_t n_out, int64_t* lo, int64_t* hi, double* f) {
    double src = (static_cast<double>(o) + 0.5) * static_cast<double>(n_in) / static_cast<double>(n_out) - 0.5;
    if (src < 0) src = 0;
    *lo = std::min(static_cast<int64_t>(std::floor(src)), n_in - 1);
    *hi = std::min(*lo + 1, n_in - 1);
    *f = src - static_cast<double>(*lo);
  };
  std::vector<double> out;
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      int64_t y0, y1, x0, x1;
      double fy, fx;
      coord(y, H, h, &y0, &y1, &fy);
      coord(x, W, w, &x0, &x1, &fx);
      auto at = [&](int64_t r, int64_t c) { return in[static_cast<size_t>(r * W + c)]; };
      out.push_back((1 - fy) * ((1 - fx) * at(y0, x0) + fx * at(y0, x1)) +
                    fy * ((1 - fx) * at(y1, x0) + fx * at(y1, x1)));
    }
  }
  return out;
}

TEST(Resize, MatchesFloat64ReferenceUpAndDown) {
  Tensor x = rand({2, 7, 9}, kFloat64);
  for (auto [h, w] : {std::pair<int64_t, int64_t>{13, 4}, {3, 20}, {7, 9}, {1, 1}}) {
    Tensor y = Resize(h, w)(x);
    ASSERT_EQ(y.sizes(), (IntArray{2, h, w}));
    for (int64_t c = 0; c < 2; ++c) {
      EXPECT_THAT(Vals(y[c]), Pointwise(DoubleNear(1e-12), ReferenceResize(Vals(x[c]), 7, 9, h, w))) << h << "x" << w;
    }
  }
}

TEST(Resize, HalvingAveragesTwoByTwoBlocks) {
  Tensor x = rand({1, 8, 6});
  Tensor y = Resize(4, 3)(x);
  Tensor blocks = x.reshape({1, 4, 2, 3, 2}).mean({2, 4});
  EXPECT_THAT(Vals(y), Pointwise(DoubleNear(1e-6), Vals(blocks)));
  EXPECT_TRUE(equal(Resize(8, 6)(x), x));  // same size: identity
}

TEST(Resize, ShorterSideKeepsAspectAndUint8Rounds) {
  Tensor img = randint(0, 256, {3, 30, 45}).to(kUInt8);
  Tensor y = Resize(20)(img);
  EXPECT_EQ(y.sizes(), (IntArray{3, 20, 30}));
  EXPECT_EQ(y.dtype(), kUInt8);
  Tensor ref = round(Resize(20)(img.to(kFloat64))).to(kUInt8);
  EXPECT_TRUE(equal(y, ref));
  EXPECT_EQ(Resize(10)(zeros({1, 40, 20})).sizes(), (IntArray{1, 20, 10}));
  EXPECT_THAT(ErrorOf([] { Resize(0, 3); }), HasSubstr("positive size"));
}

// ---- RandomErasing ----

TEST(RandomErasing, ErasesOneRectangleWithinScaleAndRatio) {
  RandomErasing erase({.p = 1.0, .value = {-5.0}}, 3);
  RandomErasing twin({.p = 1.0, .value = {-5.0}}, 3);
  for (int call = 0; call < 50; ++call) {
    Tensor x = rand({3, 32, 40});
    Tensor y = erase(x);
    const auto [top, left, h, w] = twin.NextRectangle(32, 40);
    ASSERT_GT(h, 0);
    Tensor window = y.narrow(1, top, h).narrow(2, left, w);
    EXPECT_TRUE(equal(window, full_like(window, -5.0)));
    // Everything else is untouched.
    EXPECT_EQ((y != x).sum().item<int64_t>(), 3 * h * w);
    const double area = static_cast<double>(h * w) / (32.0 * 40.0),
                 aspect = static_cast<double>(h) / static_cast<double>(w);
    EXPECT_GE(area, 0.02 * 0.7);
    EXPECT_LE(area, 0.33 * 1.3);
    EXPECT_GE(aspect, 0.3 * 0.7);
    EXPECT_LE(aspect, 3.3 * 1.4);
  }
}

TEST(RandomErasing, ProbabilityPerChannelValuesAndNoise) {
  Tensor x = rand({2, 16, 16});
  RandomErasing never({.p = 0.0}, 1);
  EXPECT_TRUE(equal(never(x), x));
  int erased = 0;
  RandomErasing half({.p = 0.5}, 2);
  for (int i = 0; i < 400; ++i) erased += !equal(half(x), x);
  EXPECT_NEAR(erased, 200, 40);
  RandomErasing per_channel({.p = 1.0, .value = {7.0, 9.0}}, 4);
  Tensor y = per_channel(x);
  EXPECT_EQ((y == 7.0).sum().item<int64_t>(), (y == 9.0).sum().item<int64_t>());
  EXPECT_GT((y == 7.0).sum().item<int64_t>(), 0);
  RandomErasing noise({.p = 1.0, .scale = {0.5, 0.5}, .ratio = {1.0, 1.0}, .random_value = true}, 5);
  Tensor big = zeros({1, 200, 200});
  Tensor z = noise(big);
  Tensor changed = z.masked_select(z != 0.0);
  EXPECT_GT(changed.numel(), 15000);
  EXPECT_NEAR(changed.mean().item<float>(), 0.0, 0.05);
  EXPECT_NEAR(changed.std().item<float>(), 1.0, 0.05);
  EXPECT_THAT(ErrorOf([&] { RandomErasing({.p = 1.0, .value = {1, 2, 3}})(x); }), HasSubstr("1 or 2 fill values"));
  EXPECT_THAT(ErrorOf([] { RandomErasing({.p = 2.0}); }), HasSubstr("p in [0, 1]"));
}

}  // namespace
