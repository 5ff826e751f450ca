// Convolution, pooling, normalisation and embedding layers: forward against direct float64
// loops written here from the definitions, backward by gradcheck, and the BatchNorm
// train/eval numbers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/anvil.h"
#include "core/backend/cpu/isa.h"
#include "core/nn/init.h"
#include "core/nn/nn.h"
#include "tests/core/test_util.h"

namespace anvil::nn {
namespace {

using test::ErrorOf;
using test::Vals;
using ::testing::DoubleNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

// Direct convolution: out[n, o, y, x] = b[o] + sum_{c in group, i, j} w[o, c, i, j] *
// in[n, g*Cg + c, y*sh - ph + i*dh, x*sw - pw + j*dw] (zero outside).
std::vector<double> DirectConv(const Tensor& in, const Tensor& w, const Tensor& b, int64_t sh, int64_t sw,
                               int64_t ph_top, int64_t pw_left, int64_t dh, int64_t dw, int64_t G, int64_t OH,
                               int64_t OW) {
  const int64_t N = in.size(0), C = in.size(1), H = in.size(2), W = in.size(3);
  const int64_t OC = w.size(0), Cg = C / G, KH = w.size(2), KW = w.size(3);
  const auto iv = Vals(in), wv = Vals(w);
  const auto bv = b.defined() ? Vals(b) : std::vector<double>(static_cast<size_t>(OC), 0.0);
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o)
      for (int64_t y = 0; y < OH; ++y)
        for (int64_t x = 0; x < OW; ++x) {
          double acc = bv[static_cast<size_t>(o)];
          const int64_t g = o / (OC / G);
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < KH; ++i)
              for (int64_t j = 0; j < KW; ++j) {
                const int64_t yy = y * sh - ph_top + i * dh, xx = x * sw - pw_left + j * dw;
                if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                acc += wv[static_cast<size_t>(((o * Cg + c) * KH + i) * KW + j)] *
                       iv[static_cast<size_t>(((n * C + g * Cg + c) * H + yy) * W + xx)];
              }
          out.push_back(acc);
        }
  return out;
}

TEST(Conv2dTest, MatchesDirectConvolution) {
  struct Case {
    int64_t C, OC, KH, KW, sh, sw, ph, pw, dh, dw, G;
  };
  for (const Case& k : {Case{3, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1}, Case{4, 6, 3, 2, 2, 1, 0, 1, 1, 2, 2},
                        Case{6, 6, 1, 1, 1, 1, 0, 0, 1, 1, 6}, Case{2, 3, 5, 5, 3, 2, 2, 2, 1, 1, 1}}) {
    Tensor x = randn({2, k.C, 9, 8}, kFloat64), w = randn({k.OC, k.C / k.G, k.KH, k.KW}, kFloat64);
    Tensor b = randn({k.OC}, kFloat64);
    F::Conv2dParams p{{k.sh, k.sw}, {k.ph, k.pw}, {k.dh, k.dw}, k.G};
    Tensor y = F::conv2d(x, w, b, p);
    const int64_t OH = (9 + 2 * k.ph - k.dh * (k.KH - 1) - 1) / k.sh + 1;
    const int64_t OW = (8 + 2 * k.pw - k.dw * (k.KW - 1) - 1) / k.sw + 1;
    ASSERT_EQ(y.sizes(), (IntArray{2, k.OC, OH, OW}));
    EXPECT_THAT(Vals(y),
                Pointwise(DoubleNear(1e-10), DirectConv(x, w, b, k.sh, k.sw, k.ph, k.pw, k.dh, k.dw, k.G, OH, OW)));
  }
}

TEST(Conv2dTest, SamePaddingKeepsSizeIncludingEvenKernels) {
  Tensor x = randn({1, 2, 7, 6}, kFloat64), w = randn({3, 2, 4, 3}, kFloat64);
  Tensor y = F::conv2d(x, w, Tensor(), {.same = true});
  EXPECT_EQ(y.sizes(), (IntArray{1, 3, 7, 6}));
  // Even kernel 4: total padding 3, one row above and two below (PyTorch's split).
  EXPECT_THAT(Vals(y), Pointwise(DoubleNear(1e-10), DirectConv(x, w, Tensor(), 1, 1, 1, 1, 1, 1, 1, 7, 6)));
  EXPECT_THAT(ErrorOf([&] { F::conv2d(x, w, Tensor(), {.stride = {2, 2}, .same = true}); }), HasSubstr("stride 1"));
}

TEST(Conv2dTest, GradcheckWithStrideDilationAndGroups) {
  Tensor x = randn({2, 4, 6, 5}, kFloat64).requires_grad_();
  Tensor w = randn({4, 2, 3, 2}, kFloat64).requires_grad_();
  Tensor b = randn({4}, kFloat64).requires_grad_();
  auto r = autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{F::conv2d(in[0], in[1], in[2], {{2, 1}, {1, 0}, {1, 2}, 2})};
      },
      {x, w, b});
  EXPECT_TRUE(r.ok) << r.message;
}

// The float32 kernels (implicit GEMM for stride 1, the AVX-512 GEMM, per-task weight-gradient
// partials, the column split for small batches) against the float64 path, which runs on
// BLAS dgemm with explicit columns: forward output and all three gradients.
TEST(Conv2dTest, Float32KernelsMatchTheFloat64Path) {
  struct Case {
    const char* name;
    IntArray x, w;
    F::Conv2dParams p;
  };
  const std::vector<Case> cases = {
      {"3x3 pad 1, 32 channels", {4, 16, 28, 28}, {32, 16, 3, 3}, {.padding = {1, 1}}},
      {"batch 1 (column split)", {1, 8, 12, 45}, {20, 8, 3, 3}, {.padding = {1, 1}}},
      {"same, even kernel", {3, 5, 9, 7}, {18, 5, 4, 2}, {.same = true}},
      {"dilation 2, no padding", {2, 6, 11, 13}, {17, 6, 3, 3}, {.dilation = {2, 2}}},
      {"groups 2, 16 per group", {5, 6, 8, 8}, {32, 3, 3, 3}, {.padding = {1, 1}, .groups = 2}},
      {"few output channels", {3, 1, 10, 10}, {6, 1, 5, 5}, {.padding = {2, 2}}},
      {"1x1", {3, 24, 5, 6}, {20, 24, 1, 1}, {}},
      {"stride 2 (explicit columns)", {3, 4, 9, 10}, {19, 4, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}},
      {"deep K (k chunks)", {2, 40, 7, 7}, {24, 40, 3, 3}, {.padding = {1, 1}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor x64 = randn(c.x, kFloat64), w64 = randn(c.w, kFloat64) * 0.2, b64 = randn({c.w[0]}, kFloat64);
    std::vector<Tensor> grads[2];
    Tensor outs[2];
    for (int k = 0; k < 2; ++k) {
      const ScalarType dt = k == 0 ? kFloat32 : kFloat64;
      Tensor x = x64.to(dt).requires_grad_(), w = w64.to(dt).requires_grad_(), b = b64.to(dt).requires_grad_();
      outs[k] = F::conv2d(x, w, b, c.p);
      manual_seed(7);  // the same upstream gradient both times
      Tensor up = randn(outs[k].sizes(), kFloat64).to(dt);
      (outs[k] * up).sum().backward();
      grads[k] = {x.grad(), w.grad(), b.grad()};
    }
    ASSERT_EQ(outs[0].sizes(), outs[1].sizes());
    auto close = [](const Tensor& a, const Tensor& b) {
      const double scale = std::max(1.0, b.abs().max().item<double>());
      return (a.to(kFloat64) - b).abs().max().item<double>() / scale;
    };
    EXPECT_LT(close(outs[0], outs[1]), 1e-5) << "output";
    EXPECT_LT(close(grads[0][0], grads[1][0]), 1e-5) << "grad input";
    EXPECT_LT(close(grads[0][1], grads[1][1]), 1e-5) << "grad weight";
    EXPECT_LT(close(grads[0][2], grads[1][2]), 1e-5) << "grad bias";
  }
}

TEST(Conv2dTest, ModuleShapesErrorsAndConv1d) {
  Conv2d conv(3, 8, {3, 3}, {.padding = {1, 1}});
  EXPECT_EQ(conv(randn({4, 3, 10, 10})).sizes(), (IntArray{4, 8, 10, 10}));
  EXPECT_THAT(ErrorOf([&] { conv(randn({4, 2, 10, 10})); }), HasSubstr("expects 3 input channels"));
  Tensor x = randn({2, 4, 11}, kFloat64), w = randn({6, 2, 3}, kFloat64);
  Tensor y = F::conv1d(x, w, Tensor(), 2, 1, 1, 2);
  const auto ref = DirectConv(x.unsqueeze(2), w.unsqueeze(2), Tensor(), 1, 2, 0, 1, 1, 1, 2, 1, y.size(2));
  EXPECT_THAT(Vals(y), Pointwise(DoubleNear(1e-10), ref));
}

// torch.nn.init's published standard deviations: xavier_normal_ gain * sqrt(2 / (fan_in +
// fan_out)), kaiming_normal_ gain / sqrt(fan) with gain sqrt(2 / (1 + a^2)); 131,072 draws
// put the sample's standard deviation within 1 % of it.
TEST(InitTest, NormalInitialisersDrawWithTorchNnInitsStandardDeviations) {
  manual_seed(11);
  const auto moments = [](const Tensor& t) {
    const Tensor d = t.to(kFloat64);
    return std::pair<double, double>{d.mean().item<double>(), d.std().item<double>()};
  };
  Tensor w = empty({256, 512}, kFloat32);  // fan_in 512, fan_out 256
  init::xavier_normal_(w, 2.0);
  auto [mean, sd] = moments(w);
  EXPECT_NEAR(sd, 2.0 * std::sqrt(2.0 / 768.0), 0.01 * 2.0 * std::sqrt(2.0 / 768.0));
  EXPECT_NEAR(mean, 0.0, 4 * sd / std::sqrt(131072.0));
  init::kaiming_normal_(w, 0.0, /*fan_in=*/true, "relu");
  std::tie(mean, sd) = moments(w);
  EXPECT_NEAR(sd, std::sqrt(2.0) / std::sqrt(512.0), 0.01 * std::sqrt(2.0 / 512.0));
  init::kaiming_normal_(w, 0.5, /*fan_in=*/false);  // leaky_relu, slope 0.5, fan_out
  std::tie(mean, sd) = moments(w);
  const double want = std::sqrt(2.0 / 1.25) / std::sqrt(256.0);
  EXPECT_NEAR(sd, want, 0.01 * want);
  init::ones_(w);
  EXPECT_TRUE(equal(w, ones({256, 512})));
}

TEST(InitTest, RandnLikeDrawsAFreshStandardNormalOfTheSameShapeAndDtype) {
  manual_seed(12);
  const Tensor x = full({300, 400}, 5.0, TensorOptions(kFloat64));
  const Tensor r = randn_like(x);
  EXPECT_EQ(r.sizes(), x.sizes());
  EXPECT_EQ(r.dtype(), kFloat64);
  EXPECT_NEAR(r.mean().item<double>(), 0.0, 4.0 / std::sqrt(120000.0));
  EXPECT_NEAR(r.std().item<double>(), 1.0, 0.01);
  EXPECT_FALSE(equal(r, randn_like(x))) << "each call draws afresh";
}

TEST(PoolTest, MaxPoolMatchesLoopsAndRoutesGradToTheMax) {
  Tensor x = randn({2, 3, 7, 6}, kFloat64).requires_grad_();
  Tensor y = F::max_pool2d(x, {.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 0}});
  ASSERT_EQ(y.sizes(), (IntArray{2, 3, 4, 3}));
  const auto xv = Vals(x);
  std::vector<double> ref;
  for (int64_t nc = 0; nc < 6; ++nc)
    for (int64_t oy = 0; oy < 4; ++oy)
      for (int64_t ox = 0; ox < 3; ++ox) {
        double m = -INFINITY;
        for (int64_t i = 0; i < 3; ++i)
          for (int64_t j = 0; j < 2; ++j) {
            const int64_t yy = oy * 2 - 1 + i, xx = ox * 2 + j;
            if (yy >= 0 && yy < 7 && xx < 6) m = std::max(m, xv[static_cast<size_t>((nc * 7 + yy) * 6 + xx)]);
          }
        ref.push_back(m);
      }
  EXPECT_EQ(Vals(y), ref);
  y.sum().backward();
  // Each window sends 1 to exactly one element: the gradient sums to the window count.
  EXPECT_EQ(x.grad().sum().item<double>(), static_cast<double>(y.numel()));
  auto r = autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{F::max_pool2d(in[0], {.kernel = {2, 2}})};
      },
      {randn({1, 2, 4, 4}, kFloat64).requires_grad_()});
  EXPECT_TRUE(r.ok) << r.message;
}

// The 16-bit floats take the same elements as float32 does for the same values (float32's
// choices are checked against PyTorch in the conformance suite): ties, a NaN, windows of -inf
// over the padding, ceil_mode's partial windows and dilation.
TEST(PoolTest, MaxPoolPicksTheSameElementsInEveryFloatingDtype) {
  Tensor x = round(randn({2, 3, 9, 8}) * 2).contiguous();  // few distinct values: ties in most windows
  float* px = x.data_ptr<float>();
  px[(1 * 9 + 4) * 8 + 3] = NAN;  // image 0, channel 1
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 3; ++c) px[r * 8 + c] = -INFINITY;  // image 0, channel 0's corner
  }
  const std::vector<F::Pool2dParams> params = {
      {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}},
      {.kernel = {2, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true},
      {.kernel = {3, 2}, .stride = {1, 2}, .padding = {1, 0}, .dilation = {2, 3}},
  };
  for (const auto& p : params) {
    const auto [ref_values, ref_indices] = F::max_pool2d_with_indices(x, p);
    for (ScalarType dt : {kFloat64, kBFloat16, kFloat16}) {
      const auto [values, indices] = F::max_pool2d_with_indices(x.to(dt), p);
      EXPECT_TRUE(equal(indices, ref_indices)) << dt;
      const Tensor v = values.to(kFloat32);
      EXPECT_TRUE(equal(isnan(v), isnan(ref_values))) << dt;
      EXPECT_TRUE(equal(where(isnan(v), zeros_like(v), v), where(isnan(ref_values), zeros_like(v), ref_values))) << dt;
    }
  }
}

// Float32 max pooling runs sixteen windows at a time on AVX-512 and one at a time below it:
// on random geometries (several blocks of sixteen outputs and a partial one, padding,
// dilation, ceil_mode), with ties, NaNs and windows of -inf, every level picks the same
// elements.
TEST(PoolTest, MaxPoolPicksTheSameElementsAtEveryIsaLevel) {
  if (cpu::active_isa() < CpuIsa::kAvx512) GTEST_SKIP() << "one max-pooling path below AVX-512";
  manual_seed(17);
  std::mt19937 rng(17);
  const auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t H = pick(1, 23), W = pick(1, 23);
    F::Pool2dParams p;
    p.kernel = {pick(1, std::min<int64_t>(H, 4)), pick(1, std::min<int64_t>(W, 4))};
    p.stride = {pick(1, 3), pick(1, 3)};
    p.dilation = {pick(1, 2), pick(1, 2)};
    p.padding = {std::min(pick(0, 2), p.kernel[0] / 2), std::min(pick(0, 2), p.kernel[1] / 2)};
    p.ceil_mode = pick(0, 1) == 1;
    if (p.dilation[0] * (p.kernel[0] - 1) + 1 > H + 2 * p.padding[0] ||
        p.dilation[1] * (p.kernel[1] - 1) + 1 > W + 2 * p.padding[1])
      continue;
    Tensor x =
        round(randn({5, 3, H, W}) * 1.5).contiguous();  // few distinct values: ties; 15 planes: groups and a rest
    float* px = x.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (pick(0, 40) == 0) px[i] = NAN;
      if (pick(0, 10) == 0) px[i] = -INFINITY;
    }
    for (int64_t i = 0; i < H * W; ++i) px[i] = -INFINITY;  // a plane of -inf
    SCOPED_TRACE("input " + shape_str(x.sizes()) + ", kernel " + std::to_string(p.kernel[0]) + "x" +
                 std::to_string(p.kernel[1]) + ", stride " + std::to_string(p.stride[0]) + "," +
                 std::to_string(p.stride[1]) + ", padding " + std::to_string(p.padding[0]) + "," +
                 std::to_string(p.padding[1]) + ", dilation " + std::to_string(p.dilation[0]) + "," +
                 std::to_string(p.dilation[1]) + (p.ceil_mode ? ", ceil_mode" : ""));
    const auto [values, indices] = F::max_pool2d_with_indices(x, p);
    for (CpuIsa level : {CpuIsa::kAvx2, CpuIsa::kGeneric}) {
      const cpu::ScopedIsa lower(level);
      const auto [v, i] = F::max_pool2d_with_indices(x, p);
      ASSERT_TRUE(equal(i, indices)) << "at ISA level " << isa_name(level);
      ASSERT_TRUE(equal(isnan(v), isnan(values)));
    }
  }
}

TEST(PoolTest, AvgPoolWithAndWithoutPaddingCountAndAdaptive) {
  Tensor x = randn({1, 1, 4, 4}, kFloat64);
  const auto xv = Vals(x);
  auto at = [&](int64_t r, int64_t c) {
    return (r < 0 || r >= 4 || c < 0 || c >= 4) ? 0.0 : xv[static_cast<size_t>(r * 4 + c)];
  };
  Tensor inc = F::avg_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
  Tensor exc = F::avg_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false});
  // Top-left window covers rows/cols -1..1: 4 real elements of 9.
  double s = 0;
  for (int64_t r = -1; r <= 1; ++r)
    for (int64_t c = -1; c <= 1; ++c) s += at(r, c);
  EXPECT_NEAR(Vals(inc)[0], s / 9, 1e-12);
  EXPECT_NEAR(Vals(exc)[0], s / 4, 1e-12);
  // Adaptive 4 -> 3: windows rows [0,2), [1,3), [2,4).
  Tensor ad = F::adaptive_avg_pool2d(x, {3, 3});
  EXPECT_NEAR(Vals(ad)[4], (at(1, 1) + at(1, 2) + at(2, 1) + at(2, 2)) / 4, 1e-12);
  EXPECT_TRUE(allclose(F::adaptive_avg_pool2d(x, {2, 2}), F::avg_pool2d(x, {.kernel = {2, 2}})));
}

TEST(BatchNormTest, TrainUsesBatchStatsAndUpdatesRunningWithUnbiasedVariance) {
  BatchNorm2d bn(3);
  bn.to(kFloat64);
  Tensor x = randn({4, 3, 2, 2}, kFloat64) * 2.0 + 1.0;
  Tensor y = bn(x);
  const auto xv = Vals(x), yv = Vals(y);
  for (int64_t c = 0; c < 3; ++c) {
    std::vector<double> v;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t i = 0; i < 4; ++i) v.push_back(xv[static_cast<size_t>((n * 3 + c) * 4 + i)]);
    double mean = 0, ss = 0;
    for (double a : v) mean += a;
    mean /= 16;
    for (double a : v) ss += (a - mean) * (a - mean);
    const double var_b = ss / 16, var_u = ss / 15;
    EXPECT_NEAR(yv[static_cast<size_t>(c * 4)], (v[0] - mean) / std::sqrt(var_b + 1e-5), 1e-10);
    EXPECT_NEAR(Vals(bn.running_mean)[static_cast<size_t>(c)], 0.1 * mean, 1e-12);
    EXPECT_NEAR(Vals(bn.running_var)[static_cast<size_t>(c)], 0.9 + 0.1 * var_u, 1e-12);
  }
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  bn.eval();
  Tensor z = bn(x);
  const double rm = Vals(bn.running_mean)[0], rv = Vals(bn.running_var)[0];
  EXPECT_NEAR(Vals(z)[0], (xv[0] - rm) / std::sqrt(rv + 1e-5), 1e-10);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);  // eval does not count
  bn.train();
  EXPECT_THAT(ErrorOf([&] { bn(randn({1, 3, 1, 1}, kFloat64)); }), HasSubstr("more than 1 value per channel"));
}

TEST(NormTest, LayerNormGroupNormMatchDefinitionsAndGradcheck) {
  Tensor x = randn({2, 4, 3}, kFloat64);
  Tensor ln = F::layer_norm(x, {3});
  const auto xv = Vals(x), lv = Vals(ln);
  double m = (xv[0] + xv[1] + xv[2]) / 3, v = 0;
  for (int i = 0; i < 3; ++i) v += (xv[static_cast<size_t>(i)] - m) * (xv[static_cast<size_t>(i)] - m) / 3;
  EXPECT_NEAR(lv[1], (xv[1] - m) / std::sqrt(v + 1e-5), 1e-12);
  Tensor gn = F::group_norm(x, 2);  // groups of 2 channels x 3 positions
  const auto gv = Vals(gn);
  m = 0;
  for (int i = 0; i < 6; ++i) m += xv[static_cast<size_t>(i)] / 6;
  v = 0;
  for (int i = 0; i < 6; ++i) v += (xv[static_cast<size_t>(i)] - m) * (xv[static_cast<size_t>(i)] - m) / 6;
  EXPECT_NEAR(gv[4], (xv[4] - m) / std::sqrt(v + 1e-5), 1e-12);
  Tensor w = randn({3}, kFloat64).requires_grad_(), b = randn({3}, kFloat64).requires_grad_();
  auto r = autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{F::layer_norm(in[0], {3}, in[1], in[2])}; },
      {x.detach().requires_grad_(), w, b});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(EmbeddingTest, LooksUpRowsAndPaddingRowGetsNoGradient) {
  Embedding emb(10, 4, /*padding_idx=*/0);
  EXPECT_TRUE(equal(emb.weight[0], zeros({4})));
  Tensor idx = tensor(std::vector<int64_t>{3, 0, 3, 7}, IntArray{2, 2});
  Tensor out = emb(idx);
  EXPECT_EQ(out.sizes(), (IntArray{2, 2, 4}));
  EXPECT_TRUE(equal(out[1][1], emb.weight[7]));
  out.sum().backward();
  EXPECT_TRUE(equal(emb.weight.grad()[3], full({4}, 2.0)));  // looked up twice
  EXPECT_TRUE(equal(emb.weight.grad()[0], zeros({4})));
  EXPECT_THAT(ErrorOf([&] { emb(tensor(std::vector<int64_t>{10})); }), HasSubstr("index 10 is out of range for 10"));
}

}  // namespace
}  // namespace anvil::nn
