// Forward values of the reductions and softmax (core/ops/reduce.cc),
// against references that do not come from the engine: float64 std:: math, naive loops,
// hand-worked examples (many from PyTorch's documentation) and PyTorch's documented semantics.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <numbers>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "core/anvil.h"
#include "tests/core/ops_test_util.h"
#include "tests/core/test_util.h"

using namespace anvil;
using namespace anvil::test;
using namespace anvil::ops_test;
using ::testing::HasSubstr;

namespace {
// Reference reduction of a [2, 3, 4] double array along one dim.
std::vector<double> Reduce3(const std::vector<double>& x, int dim,
                            const std::function<double(const std::vector<double>&)>& f) {
  const int s[3] = {2, 3, 4};
  std::vector<double> out;
  int kept[2], nk = 0;
  for (int d = 0; d < 3; ++d)
    if (d != dim) kept[nk++] = d;
  const int o0 = kept[0], o1 = kept[1];
  for (int a = 0; a < s[o0]; ++a)
    for (int b = 0; b < s[o1]; ++b) {
      std::vector<double> row;
      for (int r = 0; r < s[dim]; ++r) {
        int idx[3];
        idx[dim] = r;
        idx[o0] = a;
        idx[o1] = b;
        row.push_back(x[idx[0] * 12 + idx[1] * 4 + idx[2]]);
      }
      out.push_back(f(row));
    }
  return out;
}
double RSum(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }
double RMean(const std::vector<double>& v) { return RSum(v) / static_cast<double>(v.size()); }
double RVar(const std::vector<double>& v, int corr) {
  double m = RMean(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / (static_cast<double>(v.size()) - corr);
}
}  // namespace

TEST(Reductions, SumMeanProdOverEachDim) {
  manual_seed(11);
  Tensor x = randn({2, 3, 4}, kFloat64);
  std::vector<double> xv = Vals(x);
  for (int d = 0; d < 3; ++d) {
    ExpectClose(Vals(x.sum({d})), Reduce3(xv, d, RSum), 1e-12, 1e-12, "sum dim " + std::to_string(d));
    ExpectClose(Vals(x.mean({d})), Reduce3(xv, d, RMean), 1e-12, 1e-12, "mean dim " + std::to_string(d));
    ExpectClose(Vals(prod(x, {d})),
                Reduce3(xv, d,
                        [](const std::vector<double>& v) {
                          double p = 1;
                          for (double e : v) p *= e;
                          return p;
                        }),
                1e-12, 1e-12, "prod dim " + std::to_string(d));
  }
  EXPECT_EQ(x.sum({1}).sizes(), (IntArray{2, 4}));
  EXPECT_EQ(x.sum({1}, true).sizes(), (IntArray{2, 1, 4}));
  EXPECT_EQ(x.sum({0, 2}, true).sizes(), (IntArray{1, 3, 1}));
  EXPECT_EQ(x.sum({-1}).sizes(), (IntArray{2, 3}));
  EXPECT_EQ(x.sum().dim(), 0);
  EXPECT_NEAR(x.sum().item<double>(), RSum(xv), 1e-12);
  EXPECT_NEAR(x.mean().item<double>(), RMean(xv), 1e-12);
  // Multiple dims at once.
  std::vector<double> s02(3, 0.0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) s02[j] += xv[i * 12 + j * 4 + k];
  ExpectClose(Vals(x.sum({0, 2})), s02, 1e-12, 1e-12, "sum {0,2}");
  ExpectClose(Vals(x.sum({2, 0})), s02, 1e-12, 1e-12, "sum {2,0}");
}

TEST(Reductions, IntegerSumsPromoteToInt64) {
  Tensor i32 = tensor(std::vector<int32_t>{1, 2, 3});
  EXPECT_EQ(sum(i32).dtype(), kInt64);
  EXPECT_EQ(sum(i32).item<int64_t>(), 6);
  Tensor b = Bool({true, false, true, true});
  EXPECT_EQ(sum(b).dtype(), kInt64);
  EXPECT_EQ(sum(b).item<int64_t>(), 3);
  EXPECT_EQ(prod(i32).dtype(), kInt64);
  EXPECT_EQ(cumsum(i32, 0).dtype(), kInt64);
  EXPECT_EQ(sum(F32({1, 2}), {}, false, kFloat64).dtype(), kFloat64);
  // 2^31 overflows int32 but not the int64 accumulator.
  Tensor big = tensor(std::vector<int32_t>{2147483647, 1});
  EXPECT_EQ(sum(big).item<int64_t>(), 2147483648LL);
}

TEST(Reductions, EmptyReductions) {
  Tensor e = zeros({0, 3});
  EXPECT_EQ(Vals(e.sum({0})), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(Vals(prod(e, {0})), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(e.sum().item<double>(), 0.0);
  EXPECT_TRUE(std::isnan(e.mean().item<double>()));
  EXPECT_EQ(e.sum({1}).sizes(), (IntArray{0}));
}

TEST(Reductions, LongRowSumIsAccurate) {
  // 1e6 ones: a naive float32 running sum would stall at 2^24; any blocked sum is exact.
  Tensor x = ones({1000000});
  EXPECT_EQ(x.sum().item<double>(), 1e6);
  EXPECT_EQ(x.mean().item<double>(), 1.0);
  Tensor y = full({3, 70000}, 0.1);
  ExpectClose(Vals(y.sum({1})), {7000, 7000, 7000}, 1e-5, 0);
  std::vector<double> cols = Vals(y.sum({0}));
  ASSERT_EQ(cols.size(), 70000u);
  EXPECT_NEAR(cols[123], 0.3, 1e-6);
  EXPECT_NEAR(cols[69999], 0.3, 1e-6);
}

TEST(Reductions, AmaxAminMaxMin) {
  Tensor x = F32({3, 7, 1, 7, 2, 0, 9, 5, -1, 4, 4, 8}, IntArray{3, 4});
  EXPECT_EQ(Vals(amax(x, {1})), (std::vector<double>{7, 9, 8}));
  EXPECT_EQ(Vals(amin(x, {1})), (std::vector<double>{1, 0, -1}));
  EXPECT_EQ(Vals(amax(x, {0})), (std::vector<double>{3, 7, 9, 8}));
  EXPECT_EQ(Vals(amin(x, {0})), (std::vector<double>{-1, 0, 1, 5}));
  EXPECT_EQ(amax(x, {1}, true).sizes(), (IntArray{3, 1}));
  EXPECT_EQ(x.max().item<double>(), 9);
  EXPECT_EQ(x.min().item<double>(), -1);
  auto [mv, mi] = x.max(1);
  EXPECT_EQ(Vals(mv), (std::vector<double>{7, 9, 8}));
  EXPECT_EQ(Longs(mi), (std::vector<int64_t>{1, 2, 3}));  // first of the tied 7s
  auto [nv, ni] = x.min(0, true);
  EXPECT_EQ(nv.sizes(), (IntArray{1, 4}));
  EXPECT_EQ(Vals(nv), (std::vector<double>{-1, 0, 1, 5}));
  EXPECT_EQ(Longs(ni), (std::vector<int64_t>{2, 1, 0, 1}));
  EXPECT_EQ(ni.dtype(), kInt64);
  // Integer tensors keep their dtype.
  EXPECT_EQ(amax(I64({3, -2}), {0}).dtype(), kInt64);
  // NaN is the extreme value for max/min (PyTorch propagates it).
  Tensor n = F32({1, static_cast<float>(kNaN), 3});
  EXPECT_TRUE(std::isnan(n.max().item<double>()));
  EXPECT_TRUE(std::isnan(n.min().item<double>()));
  EXPECT_EQ(std::get<1>(n.max(0)).item<int64_t>(), 1);
  EXPECT_TRUE(std::isnan(amax(F32({1, 2, static_cast<float>(kNaN), 0}, IntArray{2, 2}), {0}).to_vector<double>()[0]));
}

// max/min over a dim with elements after it walk rows across the inner run (vectorised);
// over the last dim, one row at a time. Both must agree, ties (first wins) and NaNs included.
TEST(Reductions, MaxMinOverAnOuterDimAgreeWithTheInnermostPath) {
  manual_seed(3);
  Tensor x = (randn({5, 7, 33}) * 2).round_();  // rounding makes ties common
  float* p = x.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); i += 37) p[i] = static_cast<float>(kNaN);
  for (bool is_max : {true, false}) {
    auto [v_inner, i_inner] = is_max ? x.max(1) : x.min(1);
    const Tensor xt = x.transpose(1, 2).contiguous();
    auto [v_last, i_last] = is_max ? xt.max(2) : xt.min(2);
    EXPECT_EQ(Longs(i_inner), Longs(i_last)) << (is_max ? "max" : "min");
    const auto a = Vals(v_inner), b = Vals(v_last);
    ASSERT_EQ(a.size(), b.size());
    int nans = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      if (std::isnan(b[k])) {
        ++nans;
        EXPECT_TRUE(std::isnan(a[k]));
      } else {
        EXPECT_EQ(a[k], b[k]);
      }
    }
    EXPECT_GT(nans, 10);  // the NaN rule is exercised
  }
}

TEST(Reductions, Argmax) {
  Tensor x = F32({3, 7, 1, 7, 2, 0, 9, 5, -1, 4, 4, 8}, IntArray{3, 4});
  EXPECT_EQ(x.argmax().item<int64_t>(), 6);  // flattened index of the 9
  EXPECT_EQ(x.argmin().item<int64_t>(), 8);
  EXPECT_EQ(Longs(x.argmax(1)), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(Longs(x.argmax(0)), (std::vector<int64_t>{0, 0, 1, 2}));
  EXPECT_EQ(x.argmax(1, true).sizes(), (IntArray{3, 1}));
  EXPECT_EQ(Longs(x.argmin(-1)), (std::vector<int64_t>{2, 1, 0}));
  EXPECT_EQ(Longs(x.t().argmax(1)), (std::vector<int64_t>{0, 0, 1, 2}));
}

TEST(Reductions, VarStdWithCorrection) {
  manual_seed(5);
  Tensor x = randn({2, 3, 4}, kFloat64);
  std::vector<double> xv = Vals(x);
  for (int corr : {0, 1}) {
    for (int d = 0; d < 3; ++d) {
      auto rv = Reduce3(xv, d, [corr](const std::vector<double>& v) { return RVar(v, corr); });
      ExpectClose(Vals(x.var({d}, corr)), rv, 1e-10, 1e-12, "var");
      std::vector<double> rs;
      for (double v : rv) rs.push_back(std::sqrt(v));
      ExpectClose(Vals(x.std({d}, corr)), rs, 1e-10, 1e-12, "std");
    }
    EXPECT_NEAR(x.var({}, corr).item<double>(), RVar(xv, corr), 1e-10);
  }
  // Hand example: [1, 2, 3, 4] -> mean 2.5, sum of squares 5.
  Tensor h = F32({1, 2, 3, 4});
  EXPECT_NEAR(h.var({}, 0).item<double>(), 1.25, 1e-6);
  EXPECT_NEAR(h.var().item<double>(), 5.0 / 3.0, 1e-6);
  EXPECT_NEAR(anvil::std(h, {}, 1).item<double>(), std::sqrt(5.0 / 3.0), 1e-6);
  EXPECT_EQ(h.var({0}, 1, true).sizes(), (IntArray{1}));
  // Large offset: a one-pass E[x^2]-E[x]^2 would lose everything.
  Tensor off = F64({1e9 + 1, 1e9 + 2, 1e9 + 3});
  EXPECT_NEAR(off.var().item<double>(), 1.0, 1e-6);
}

TEST(Reductions, Norms) {
  Tensor x = F32({3, -4, 0, 12}, IntArray{2, 2});
  EXPECT_NEAR(x.norm().item<double>(), 13.0, 1e-5);
  EXPECT_NEAR(x.norm(1).item<double>(), 19.0, 1e-5);
  EXPECT_NEAR(x.norm(INFINITY).item<double>(), 12.0, 1e-6);
  ExpectClose(Vals(x.norm(2, {1})), {5, 12}, 1e-6, 0);
  ExpectClose(Vals(x.norm(1, {0})), {3, 16}, 1e-6, 0);
  ExpectClose(Vals(x.norm(INFINITY, {0}, true)), {3, 12}, 1e-6, 0);
  EXPECT_EQ(x.norm(2, {0}, true).sizes(), (IntArray{1, 2}));
  ExpectClose(Vals(x.norm(3, {1})), {std::cbrt(27.0 + 64.0), 12}, 1e-5, 0);
}

TEST(Reductions, LogSumExpIsStable) {
  Tensor x = F32({1000, 1000, 0, -1000}, IntArray{2, 2});
  std::vector<double> r = Vals(x.logsumexp({1}));
  EXPECT_NEAR(r[0], 1000 + std::log(2.0), 1e-3);
  EXPECT_NEAR(r[1], 0.0, 1e-6);
  EXPECT_TRUE(std::isfinite(r[0]));
  Tensor y = F32({-1000, -1000});
  EXPECT_NEAR(y.logsumexp({0}).item<double>(), -1000 + std::log(2.0), 1e-3);
  // Ordinary values against the definition.
  Tensor z = F64({0.5, -1.25, 2.0, 0.0});
  double ref = std::log(std::exp(0.5) + std::exp(-1.25) + std::exp(2.0) + 1.0);
  EXPECT_NEAR(z.logsumexp({0}).item<double>(), ref, 1e-12);
  EXPECT_EQ(x.logsumexp({1}, true).sizes(), (IntArray{2, 1}));
  // -inf everywhere gives -inf, one +inf gives +inf.
  EXPECT_EQ(F32({-INFINITY, -INFINITY}).logsumexp({0}).item<double>(), -kInf);
  EXPECT_EQ(F32({INFINITY, 1}).logsumexp({0}).item<double>(), kInf);
  // Column reduction of a larger matrix.
  manual_seed(1);
  Tensor m = randn({5, 7}, kFloat64) * 50;
  std::vector<double> mv = Vals(m);
  std::vector<double> want;
  for (int j = 0; j < 7; ++j) {
    double mx = -kInf;
    for (int i = 0; i < 5; ++i) mx = std::max(mx, mv[i * 7 + j]);
    double s = 0;
    for (int i = 0; i < 5; ++i) s += std::exp(mv[i * 7 + j] - mx);
    want.push_back(mx + std::log(s));
  }
  ExpectClose(Vals(m.logsumexp({0})), want, 1e-12, 1e-12, "logsumexp dim 0");
}

// Regression: every dim-reduction of a 0-dim tensor used to segfault: e.g.
// scalar_tensor(3.0).sum({0}) wrote reduce[0] into a vector<bool> of size 0 in
// ReducedSizes (core/ops/infer.cc). PyTorch accepts dim 0 / -1
// on a 0-dim tensor and returns it unchanged (indices 0).
TEST(Reductions, DimReductionsOnZeroDimTensor) {
  Tensor s = scalar_tensor(3.0);
  EXPECT_EQ(s.sum({0}).item<double>(), 3.0);
  EXPECT_EQ(s.sum({-1}, true).dim(), 0);
  EXPECT_EQ(s.mean({0}).item<double>(), 3.0);
  EXPECT_EQ(amax(s, {0}).item<double>(), 3.0);
  EXPECT_EQ(std::get<0>(s.max(0)).item<double>(), 3.0);
  EXPECT_EQ(std::get<1>(s.max(0)).item<int64_t>(), 0);
  EXPECT_EQ(s.argmax(0).item<int64_t>(), 0);
  EXPECT_EQ(s.var({0}, 0).item<double>(), 0.0);
  EXPECT_EQ(s.logsumexp({0}).item<double>(), 3.0);
  EXPECT_EQ(s.norm(2, {0}).item<double>(), 3.0);
  EXPECT_TRUE(all(s, {0}).item<bool>());
  EXPECT_EQ(std::get<0>(topk(s, 1, 0)).item<double>(), 3.0);
}

TEST(Reductions, OtherDimOpsOnZeroDimTensor) {
  Tensor s = scalar_tensor(3.0);
  EXPECT_EQ(s.sum().item<double>(), 3.0);
  EXPECT_EQ(s.cumsum(0).item<double>(), 3.0);
  EXPECT_EQ(s.softmax(0).item<double>(), 1.0);
  EXPECT_EQ(std::get<0>(sort(s, 0)).item<double>(), 3.0);
  EXPECT_EQ(gather(s, 0, scalar_tensor(0, kInt64)).item<double>(), 3.0);
  EXPECT_EQ(s.unsqueeze(0).sizes(), (IntArray{1}));
}

TEST(Reductions, AllAny) {
  Tensor b = Bool({true, false, true, true, true, true}, IntArray{2, 3});
  EXPECT_FALSE(b.all().item<bool>());
  EXPECT_TRUE(b.any().item<bool>());
  EXPECT_EQ(Bools(all(b, {1})), (std::vector<bool>{false, true}));
  EXPECT_EQ(Bools(all(b, {0})), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(Bools(any(~b, {1})), (std::vector<bool>{true, false}));
  EXPECT_EQ(all(b, {1}, true).sizes(), (IntArray{2, 1}));
  EXPECT_EQ(all(b).dtype(), kBool);
  // Non-bool inputs: non-zero is true.
  EXPECT_TRUE(F32({1, -2, 0.5}).all().item<bool>());
  EXPECT_FALSE(F32({1, 0, 0.5}).all().item<bool>());
  EXPECT_FALSE(zeros({3}).any().item<bool>());
  EXPECT_TRUE(zeros({0}).all().item<bool>());
  EXPECT_FALSE(zeros({0}).any().item<bool>());
}

TEST(Reductions, Cumsum) {
  Tensor x = Iota({2, 3});
  EXPECT_EQ(Vals(x.cumsum(1)), (std::vector<double>{0, 1, 3, 3, 7, 12}));
  EXPECT_EQ(Vals(x.cumsum(0)), (std::vector<double>{0, 1, 2, 3, 5, 7}));
  EXPECT_EQ(Vals(x.cumsum(-1)), Vals(x.cumsum(1)));
  EXPECT_EQ(Vals(x.t().cumsum(1)), (std::vector<double>{0, 3, 1, 5, 2, 7}));
  EXPECT_EQ(Longs(cumsum(I64({1, 2, 3, 4}), 0)), (std::vector<int64_t>{1, 3, 6, 10}));
}

// ====================================================================== matmul

// The backward kernels (one pass over grad and output rows) against the formulas evaluated in
// float64 by ordinary ops; a middle dim, a non-contiguous gradient, and float32.
TEST(Softmax, BackwardKernelsMatchTheFormulas) {
  manual_seed(11);
  for (ScalarType dt : {kFloat64, kFloat32}) {
    for (int64_t dim : {1, 2, -1}) {
      SCOPED_TRACE(std::string(dt == kFloat64 ? "float64" : "float32") + " dim " + std::to_string(dim));
      const Tensor x = (randn({5, 7, 3}, dt) * 2).requires_grad_();
      const Tensor up = randn({3, 7, 5}, dt).permute({2, 1, 0});  // non-contiguous
      const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
      const Tensor s = softmax(x, dim), ls = log_softmax(x, dim);
      const Tensor gs = autograd::grad({s}, {x}, {up})[0];
      const Tensor gls = autograd::grad({ls}, {x}, {up})[0];
      const Tensor s64 = s.detach().to(kFloat64), ls64 = ls.detach().to(kFloat64), u64 = up.to(kFloat64);
      EXPECT_TRUE(allclose(gs.to(kFloat64), s64 * (u64 - (u64 * s64).sum({dim}, true)), tol, tol));
      EXPECT_TRUE(allclose(gls.to(kFloat64), u64 - ls64.exp() * u64.sum({dim}, true), tol, tol));
    }
  }
}

TEST(Softmax, RowsSumToOneAndMatchDefinition) {
  manual_seed(8);
  Tensor x = randn({4, 6}, kFloat64) * 3;
  Tensor s = softmax(x, 1);
  std::vector<double> xv = Vals(x), sv = Vals(s), lv = Vals(log_softmax(x, 1));
  for (int i = 0; i < 4; ++i) {
    double mx = -kInf, z = 0, tot = 0;
    for (int j = 0; j < 6; ++j) mx = std::max(mx, xv[i * 6 + j]);
    for (int j = 0; j < 6; ++j) z += std::exp(xv[i * 6 + j] - mx);
    for (int j = 0; j < 6; ++j) {
      EXPECT_NEAR(sv[i * 6 + j], std::exp(xv[i * 6 + j] - mx) / z, 1e-14);
      EXPECT_NEAR(lv[i * 6 + j], xv[i * 6 + j] - mx - std::log(z), 1e-12);
      tot += sv[i * 6 + j];
    }
    EXPECT_NEAR(tot, 1.0, 1e-12);
  }
  // Along dim 0: columns sum to one.
  ExpectClose(Vals(softmax(x, 0).sum({0})), std::vector<double>(6, 1.0), 1e-12, 1e-12, "dim 0");
  ExpectClose(Vals(x.t().softmax(1).sum({1})), std::vector<double>(6, 1.0), 1e-12, 1e-12, "transposed");
}

TEST(Softmax, StableForLargeInputs) {
  Tensor x = F32({1000, 1001, 1002, -1000, -1001, -1002}, IntArray{2, 3});
  std::vector<double> s = Vals(softmax(x, 1));
  const double z = 1 + std::exp(1.0) + std::exp(2.0);
  ExpectClose(s, {1 / z, std::exp(1.0) / z, std::exp(2.0) / z, std::exp(2.0) / z, std::exp(1.0) / z, 1 / z}, 1e-5, 1e-7,
              "softmax large");
  std::vector<double> l = Vals(log_softmax(x, 1));
  for (double v : l) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NEAR(l[2], 2 - std::log(z), 1e-4);
  // -inf logits get probability 0.
  std::vector<double> m = Vals(softmax(F32({0, -INFINITY, 0}), 0));
  EXPECT_EQ(m[1], 0.0);
  EXPECT_NEAR(m[0], 0.5, 1e-7);
  // Integer input is refused, as PyTorch's kernels refuse it.
  EXPECT_THROW(softmax(I64({1, 2}), 0), TypeError);
  EXPECT_THROW(log_softmax(I64({1, 2}), 0), TypeError);
}

// Rows shorter than a vector take a blocked path (the exp of a block of rows in one pass):
// every row length around the switch, row counts around the block size, float32 against the
// definition in float64, and rows of -inf, +inf and NaN as PyTorch has them.
TEST(Softmax, ShortRowsAcrossBlocksMatchTheDefinition) {
  manual_seed(21);
  for (int64_t len : {1, 2, 9, 10, 15, 16, 17}) {
    for (int64_t rows : {1, 127, 128, 129, 300}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " len " + std::to_string(len));
      const Tensor x = randn({rows, len}) * 4;
      const Tensor g = randn({rows, len});
      const std::vector<double> xv = Vals(x), gv = Vals(g);
      std::vector<double> want_s(xv.size()), want_ls(xv.size()), want_gls(xv.size());
      for (int64_t r = 0; r < rows; ++r) {
        const double* row = xv.data() + r * len;
        const double mx = *std::max_element(row, row + len);
        double z = 0, gsum = 0;
        for (int64_t j = 0; j < len; ++j) z += std::exp(row[j] - mx);
        for (int64_t j = 0; j < len; ++j) gsum += gv[r * len + j];
        for (int64_t j = 0; j < len; ++j) {
          want_s[r * len + j] = std::exp(row[j] - mx) / z;
          want_ls[r * len + j] = row[j] - mx - std::log(z);
          want_gls[r * len + j] = gv[r * len + j] - want_s[r * len + j] * gsum;
        }
      }
      ExpectClose(Vals(softmax(x, 1)), want_s, 1e-6, 1e-6, "softmax");
      const Tensor xr = x.clone().requires_grad_();
      const Tensor ls = log_softmax(xr, 1);
      ExpectClose(Vals(ls), want_ls, 1e-5, 1e-5, "log_softmax");
      ExpectClose(Vals(autograd::grad({ls}, {xr}, {g})[0]), want_gls, 1e-5, 1e-5, "log_softmax gradient");
    }
  }
  // A row of -inf has no maximum to subtract: NaN, as in PyTorch; +inf or NaN anywhere in a
  // row makes that row NaN; the other rows of the block are untouched.
  const Tensor special = F32({-INFINITY, -INFINITY, -INFINITY, 1, 2, 3, INFINITY, 0, 1, NAN, 0, 1}, IntArray{4, 3});
  const std::vector<double> s = Vals(softmax(special, 1)), ls = Vals(log_softmax(special, 1));
  for (int j = 0; j < 3; ++j) {
    EXPECT_TRUE(std::isnan(s[j]) && std::isnan(ls[j])) << "all -inf, column " << j;
    EXPECT_TRUE(std::isnan(s[9 + j]) && std::isnan(ls[9 + j])) << "NaN row, column " << j;
  }
  EXPECT_TRUE(std::isnan(s[6]));  // inf - inf
  const double z = std::exp(-2.0) + std::exp(-1.0) + 1;
  EXPECT_NEAR(s[5], 1 / z, 1e-6);
  EXPECT_NEAR(ls[3], -2 - std::log(z), 1e-6);
}

// ====================================================================== where / joining

// Regression for the requirement that results do not depend on the thread count: a long
// 1-D sum/mean used to be split into get_num_threads() partial sums, so float64 sums of
// 1e5..1e6 elements differed in the last bits between 1, 2 and 3 threads.
TEST(Reductions, LongSumBitwiseIndependentOfThreadCount) {
  ThreadsGuard restore;
  for (int64_t n : {int64_t{100003}, int64_t{1000003}}) {
    manual_seed(1);
    Tensor d = rand({n}, kFloat64);
    std::vector<double> sums, means;
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      sums.push_back(d.sum().item<double>());
      means.push_back(d.mean().item<double>());
    }
    EXPECT_EQ(sums[0], sums[1]) << "n=" << n;
    EXPECT_EQ(sums[0], sums[2]) << "n=" << n;
    EXPECT_EQ(means[0], means[1]) << "n=" << n;
  }
}

TEST(Reductions, LongSumRepeatableForAFixedThreadCount) {
  ThreadsGuard restore;
  manual_seed(1);
  Tensor d = rand({1000003}, kFloat64);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    const double first = d.sum().item<double>();
    for (int r = 0; r < 5; ++r) EXPECT_EQ(d.sum().item<double>(), first);
  }
}
