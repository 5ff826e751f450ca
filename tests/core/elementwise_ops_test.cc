// Forward values of the element-wise ops (core/ops/elementwise.cc): broadcasting, type promotion, non-contiguous
// inputs, unary and binary math, where, division, against references that do not come from the engine: float64 std::
// math, naive loops, hand-worked examples (many from PyTorch's documentation) and PyTorch's documented semantics.
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

TEST(Broadcast, ColumnPlusRow) {
  Tensor a = F32({1, 2, 3}, IntArray{3, 1});
  Tensor b = F32({10, 20, 30, 40});
  Tensor c = a + b;
  EXPECT_EQ(c.sizes(), (IntArray{3, 4}));
  std::vector<double> want;
  for (double i : {1, 2, 3})
    for (double j : {10, 20, 30, 40}) want.push_back(i + j);
  EXPECT_EQ(Vals(c), want);
}

TEST(Broadcast, ThreeDimsAndScalars) {
  Tensor a = Iota({2, 1, 3});
  Tensor b = Iota({4, 1});
  Tensor c = a * b;
  EXPECT_EQ(c.sizes(), (IntArray{2, 4, 3}));
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) want.push_back((3.0 * i + k) * j);
  EXPECT_EQ(Vals(c), want);
  // 0-dim tensor broadcasts everywhere.
  Tensor s = scalar_tensor(2.0);
  EXPECT_EQ(Vals(a - s), (std::vector<double>{-2, -1, 0, 1, 2, 3}));
  EXPECT_EQ(broadcast_shapes({5, 1, 4}, {3, 1}), (IntArray{5, 3, 4}));
  EXPECT_EQ(broadcast_shapes({}, {2, 2}), (IntArray{2, 2}));
  EXPECT_EQ(broadcast_shapes({0, 1}, {1, 3}), (IntArray{0, 3}));
  auto bt = broadcast_tensors({Iota({3, 1}), Iota({2})});
  EXPECT_EQ(bt[0].sizes(), (IntArray{3, 2}));
  EXPECT_EQ(bt[1].sizes(), (IntArray{3, 2}));
}

TEST(Broadcast, ScalarOperatorsBothSides) {
  Tensor x = F32({1, 2, 4});
  EXPECT_EQ(Vals(x + 1), (std::vector<double>{2, 3, 5}));
  EXPECT_EQ(Vals(1 + x), (std::vector<double>{2, 3, 5}));
  EXPECT_EQ(Vals(x - 1), (std::vector<double>{0, 1, 3}));
  EXPECT_EQ(Vals(1 - x), (std::vector<double>{0, -1, -3}));
  EXPECT_EQ(Vals(x * 3), (std::vector<double>{3, 6, 12}));
  EXPECT_EQ(Vals(8 / x), (std::vector<double>{8, 4, 2}));
  EXPECT_EQ(Vals(x / 2), (std::vector<double>{0.5, 1, 2}));
  EXPECT_EQ(Vals(-x), (std::vector<double>{-1, -2, -4}));
  EXPECT_EQ(Vals(add(x, x, 0.5)), (std::vector<double>{1.5, 3, 6}));
  EXPECT_EQ(Vals(sub(x, x, 2)), (std::vector<double>{-1, -2, -4}));
}

// ====================================================================== type promotion

TEST(TypePromotion, IntTensorWithScalars) {
  Tensor i = I64({1, 2, 3});
  EXPECT_EQ((i + 2).dtype(), kInt64);
  Tensor f = i * 2.5;
  EXPECT_EQ(f.dtype(), kFloat32);
  EXPECT_EQ(Vals(f), (std::vector<double>{2.5, 5, 7.5}));
  EXPECT_EQ((i + true).dtype(), kInt64);
  Tensor i32 = i.to(kInt32);
  EXPECT_EQ((i32 + 5).dtype(), kInt32);  // int scalar never widens
  EXPECT_EQ((i32 * 1.5).dtype(), kFloat32);
  Tensor i8 = tensor(std::vector<int8_t>{1, 2});
  EXPECT_EQ((i8 * 2.5).dtype(), kFloat32);
}

TEST(TypePromotion, FloatScalarsEnterFloat64MathUnrounded) {
  // 0.1 and 0.9 are not float32 numbers: a scalar rounded to float32 on the way in would be
  // off by ~1e-9 here (and optimizers, whose hyper-parameters are scalars, would drift).
  Tensor x = F64({0.3, -1.7});
  EXPECT_EQ(Vals(x * 0.1), (std::vector<double>{0.3 * 0.1, -1.7 * 0.1}));
  Tensor y = x.clone();
  y.mul_(0.9).add_(x, 0.01);
  EXPECT_EQ(Vals(y), (std::vector<double>{0.3 * 0.9 + 0.01 * 0.3, -1.7 * 0.9 + 0.01 * -1.7}));
  // With float32 tensors the result stays float32 (a wrapped float ranks as the default dtype).
  EXPECT_EQ((F32({1.0f}) * 0.1).dtype(), kFloat32);
  EXPECT_EQ(Vals(F32({1.0f}) * 0.1)[0], static_cast<double>(0.1f));
}

TEST(TypePromotion, ZeroDimTensorsRankBelowDimensioned) {
  Tensor f32 = F32({1, 2});
  Tensor d0 = scalar_tensor(0.5, kFloat64);
  Tensor r = f32 + d0;
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_EQ(Vals(r), (std::vector<double>{1.5, 2.5}));
  EXPECT_EQ((d0 + f32).dtype(), kFloat32);
  // Higher category in the 0-dim tensor: it decides (PyTorch: int tensor + double 0-dim
  // tensor -> float64).
  Tensor i = I64({1, 2});
  EXPECT_EQ((i + d0).dtype(), kFloat64);
  // Same category: the dimensioned tensor wins.
  Tensor i32 = tensor(std::vector<int32_t>{1, 2});
  EXPECT_EQ((i32 + scalar_tensor(7, kInt64)).dtype(), kInt32);
  // Dimensioned tensors promote normally.
  EXPECT_EQ((f32 + F64({1, 1})).dtype(), kFloat64);
  EXPECT_EQ(result_type(f32, d0), kFloat32);
  EXPECT_EQ(result_type(i, d0), kFloat64);
  EXPECT_EQ(result_type(i32, wrap_scalar(2.0)), kFloat32);
  EXPECT_EQ(result_type(i32, wrap_scalar(int64_t{2})), kInt32);
}

TEST(TypePromotion, PromoteTypesTable) {
  EXPECT_EQ(promote_types(kUInt8, kInt8), kInt16);
  EXPECT_EQ(promote_types(kInt8, kUInt8), kInt16);
  EXPECT_EQ(promote_types(kBool, kUInt8), kUInt8);
  EXPECT_EQ(promote_types(kInt32, kFloat16), kFloat16);
  EXPECT_EQ(promote_types(kFloat16, kBFloat16), kFloat32);
  EXPECT_EQ(promote_types(kBFloat16, kFloat32), kFloat32);
  EXPECT_EQ(promote_types(kInt64, kFloat32), kFloat32);
  EXPECT_EQ(promote_types(kFloat32, kFloat64), kFloat64);
  EXPECT_EQ(promote_types(kInt16, kInt32), kInt32);
}

TEST(TypePromotion, MixedIntegerTensors) {
  Tensor u = tensor(std::vector<uint8_t>{200, 1});
  Tensor s = tensor(std::vector<int8_t>{-100, -1});
  Tensor r = u + s;
  EXPECT_EQ(r.dtype(), kInt16);
  EXPECT_EQ(Longs(r), (std::vector<int64_t>{100, 0}));
  // uint8 arithmetic with an int scalar stays uint8 and wraps modulo 256.
  Tensor w = u + 100;
  EXPECT_EQ(w.dtype(), kUInt8);
  EXPECT_EQ(Longs(w), (std::vector<int64_t>{44, 101}));
}

TEST(TypePromotion, BoolArithmetic) {
  Tensor a = Bool({true, true, false, false});
  Tensor b = Bool({true, false, true, false});
  Tensor s = a + b;
  EXPECT_EQ(s.dtype(), kBool);
  EXPECT_EQ(Bools(s), (std::vector<bool>{true, true, true, false}));
  Tensor m = a * b;
  EXPECT_EQ(m.dtype(), kBool);
  EXPECT_EQ(Bools(m), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ((a + 1).dtype(), kInt64);
  EXPECT_EQ(Longs(a + 1), (std::vector<int64_t>{2, 2, 1, 1}));
  EXPECT_EQ((a * 1.5).dtype(), kFloat32);
  EXPECT_EQ((a + I64({1, 1, 1, 1})).dtype(), kInt64);
}

TEST(TypePromotion, DivisionIsTrueDivision) {
  Tensor i = I64({1, 2, 3, -3});
  Tensor r = i / 2;
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_EQ(Vals(r), (std::vector<double>{0.5, 1, 1.5, -1.5}));
  Tensor r2 = div(i, I64({2, 2, 2, 2}));
  EXPECT_EQ(r2.dtype(), kFloat32);
  EXPECT_EQ(Vals(r2), (std::vector<double>{0.5, 1, 1.5, -1.5}));
}

TEST(TypePromotion, HalfPrecisionKeepsItsType) {
  Tensor h = F32({1, 2}).to(kFloat16);
  EXPECT_EQ((h + 1.5).dtype(), kFloat16);
  EXPECT_EQ(Vals(h + 1.5), (std::vector<double>{2.5, 3.5}));
  EXPECT_EQ((h + scalar_tensor(1.0, kFloat32)).dtype(), kFloat16);
  EXPECT_EQ((h + F32({1, 1})).dtype(), kFloat32);
  Tensor b = F32({1, 2}).to(kBFloat16);
  EXPECT_EQ((b * 2).dtype(), kBFloat16);
  EXPECT_EQ((b + h).dtype(), kFloat32);
}

TEST(TypePromotion, ComparisonsGiveBool) {
  Tensor i = I64({1, 2, 3});
  Tensor c = i < 2.5;
  EXPECT_EQ(c.dtype(), kBool);
  EXPECT_EQ(Bools(c), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(Bools(i == 2), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(Bools(i != 2), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(Bools(i >= 2), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(Bools(i > F32({0.5, 2.5, 2.5})), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(Bools(le(i, I64({1, 1, 1}))), (std::vector<bool>{true, false, false}));
  Tensor f = F32({static_cast<float>(kNaN), 1, 2});
  EXPECT_EQ(Bools(f == f), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(Bools(f != f), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(Bools(isnan(f)), (std::vector<bool>{true, false, false}));
  // Logical ops.
  Tensor a = Bool({true, false, true});
  Tensor b = Bool({true, true, false});
  EXPECT_EQ(Bools(a & b), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(Bools(a | b), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(Bools(~a), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(Bools(logical_xor(a, b)), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(Bools(logical_and(I64({0, 2, 3}), F32({1, 0, 5}))), (std::vector<bool>{false, false, true}));
}

TEST(TypePromotion, InPlaceKeepsSelfDtype) {
  Tensor f = F32({1, 2});
  f.add_(F64({0.5, 0.5}));
  EXPECT_EQ(f.dtype(), kFloat32);
  EXPECT_EQ(Vals(f), (std::vector<double>{1.5, 2.5}));
  f.mul_(I64({2, 3}));
  EXPECT_EQ(Vals(f), (std::vector<double>{3, 7.5}));
  Tensor i = I64({1, 2});
  EXPECT_THROW(i.add_(1.5), Error);  // float result can't go into an int tensor
  EXPECT_THROW(i.div_(2), Error);    // true division gives float
  i.add_(3);
  EXPECT_EQ(Longs(i), (std::vector<int64_t>{4, 5}));
}

// ====================================================================== non-contiguous inputs

TEST(NonContiguous, TransposedOperands) {
  Tensor a = Iota({3, 4});  // a[i][j] = 4i + j
  Tensor b = Iota({4, 3});  // b[i][j] = 3i + j
  Tensor s = a.t() + b;     // [4, 3]: a[j][i] + b[i][j]
  std::vector<double> want;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) want.push_back(4.0 * j + i + 3.0 * i + j);
  EXPECT_EQ(Vals(s), want);
  Tensor both = a.t() * b.t().t();
  std::vector<double> want2;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) want2.push_back((4.0 * j + i) * (3.0 * i + j));
  EXPECT_EQ(Vals(both), want2);
  // Unary on a strided slice.
  Tensor sl = Iota({10}).slice(0, 1, std::nullopt, 3);  // [1, 4, 7]
  ExpectClose(Vals(exp(sl)), {std::exp(1.0), std::exp(4.0), std::exp(7.0)}, 1e-6, 0);
  // Expanded (stride 0) operand.
  Tensor e = F32({1, 2}).unsqueeze(1).expand({2, 3});
  EXPECT_EQ(Vals(e * Iota({2, 3})), (std::vector<double>{0, 1, 2, 6, 8, 10}));
  // Reductions of a transposed tensor.
  EXPECT_EQ(Vals(a.t().sum({1})), (std::vector<double>{12, 15, 18, 21}));
  EXPECT_EQ(Vals(a.t().sum({0})), (std::vector<double>{6, 22, 38}));
  // In-place on a non-contiguous view.
  Tensor c = Iota({3, 4});
  c.t().add_(Iota({4, 3}));
  std::vector<double> want3(12);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) want3[4 * i + j] = 4.0 * i + j + 3.0 * j + i;
  EXPECT_EQ(Vals(c), want3);
}

TEST(NonContiguous, LargeStridedBinaryMatchesContiguous) {
  manual_seed(3);
  Tensor a = rand({301, 257});
  Tensor b = rand({257, 301});
  Tensor got = a.t() * b + a.t();
  Tensor want = a.t().contiguous() * b + a.t().contiguous();
  EXPECT_TRUE(equal(got, want));
}

TEST(NonContiguous, IndexingAndInPlaceOnStridedViews) {
  // Each op on a strided view must equal the same op on a contiguous copy (and write the
  // right elements of the base when it is in-place).
  manual_seed(6);
  Tensor x = randn({4, 5});
  Tensor xt = x.t(), xtc = x.t().contiguous();
  {
    Tensor a = x.clone();
    a.t().exp_();
    EXPECT_TRUE(allclose(a, exp(x)));
  }
  {
    Tensor a = x.clone();
    a.t().masked_fill_(xt > 0, 0.0);
    EXPECT_TRUE(equal(a, where(x > 0, 0.0, x)));
  }
  EXPECT_TRUE(equal(cumsum(xt, 0), cumsum(xtc, 0)));
  EXPECT_TRUE(equal(std::get<0>(sort(xt, 0)), std::get<0>(sort(xtc, 0))));
  EXPECT_TRUE(equal(xt.to(kFloat64), xtc.to(kFloat64)));
  EXPECT_TRUE(equal(cat({xt, xt}, 1), cat({xtc, xtc}, 1)));
  Tensor idx = I64({3, 0, 0, 2});
  {
    // Accumulating index_put_ into a transposed destination: rows 3, 0, 0, 2 of a [5, 4]
    // view get +1, +2, +1 (column j of the base).
    Tensor a = zeros({4, 5});
    Tensor at = a.t();
    index_put_(at, {Tensor(), idx}, ones({5, 4}), true);
    std::vector<double> want(20, 0.0);
    for (int j = 0; j < 5; ++j) {
      want[0 * 5 + j] = 2;
      want[2 * 5 + j] = 1;
      want[3 * 5 + j] = 1;
    }
    EXPECT_EQ(Vals(a), want);
  }
  {
    Tensor a = zeros({4, 5});
    a.t().scatter_(0, I64({4, 3, 2, 1}, IntArray{1, 4}), ones({1, 4}));
    // View [5, 4]: element (idx[j], j) = 1, i.e. base (j, idx[j]).
    EXPECT_EQ(Vals(a.nonzero()), (std::vector<double>{0, 4, 1, 3, 2, 2, 3, 1}));
  }
  {
    Tensor a = zeros({4, 5});
    a.t().index_add_(0, I64({1, 1}), ones({2, 4}));
    EXPECT_EQ(Vals(a.select(1, 1)), (std::vector<double>{2, 2, 2, 2}));
    EXPECT_EQ(a.sum().item<double>(), 8.0);
  }
  // Stride-0 (expanded) inputs to gather and matmul.
  Tensor e = F32({1, 2, 3}).expand({4, 3});
  EXPECT_EQ(Vals(gather(e, 1, I64({2, 1, 0, 0}, IntArray{4, 1}))), (std::vector<double>{3, 2, 1, 1}));
  Tensor row = F32({1, 2}).view({1, 2}).expand({3, 2});
  EXPECT_TRUE(allclose(mm(row, x.narrow(0, 0, 2)), mm(row.contiguous(), x.narrow(0, 0, 2))));
  Tensor col = F32({1, 2, 3, 4, 5}).view({5, 1}).expand({5, 3});
  EXPECT_TRUE(allclose(mm(x, col), mm(x, col.contiguous())));
  EXPECT_TRUE(allclose(bmm(x.unsqueeze(0).expand({3, 4, 5}), xt.unsqueeze(0).expand({3, 5, 4})),
                       mm(x, xt).unsqueeze(0).expand({3, 4, 4})));
  Tensor sl = x.slice(1, 0, std::nullopt, 2);
  EXPECT_TRUE(allclose(matmul(sl, sl.t()), matmul(sl.contiguous(), sl.t().contiguous())));
}

// ====================================================================== unary math

namespace {

const std::vector<double> kUnaryInputs = {-20,   -10,  -5,   -3,  -2,  -1, -0.5, -0.1, -1e-3, -1e-6, -1e-20, 0,
                                          1e-20, 1e-6, 1e-3, 0.1, 0.5, 1,  2,    3,    5,     10,    20};

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double atol32;  // float32 absolute slack (cancellation the formula itself has)
  double atol64;
};

double RefSigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

std::vector<UnaryCase> UnaryCases() {
  const double rs2 = 1.0 / std::sqrt(2.0), c = std::sqrt(2.0 / std::numbers::pi);
  return {
      {"exp", [](const Tensor& t) { return exp(t); }, [](double x) { return std::exp(x); }, 0, 0},
      {"tanh", [](const Tensor& t) { return tanh(t); }, [](double x) { return std::tanh(x); }, 0, 0},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }, RefSigmoid, 0, 0},
      // erf: absolute accuracy here; relative accuracy near 0 has its own test below.
      {"erf", [](const Tensor& t) { return erf(t); }, [](double x) { return std::erf(x); }, 2e-7, 0},
      {"gelu", [](const Tensor& t) { return gelu(t); }, [rs2](double x) { return 0.5 * x * std::erfc(-x * rs2); }, 1e-6,
       1e-15},
      {"gelu_tanh", [](const Tensor& t) { return gelu(t, "tanh"); },
       [c](double x) { return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x))); }, 1e-6, 1e-15},
      {"silu", [](const Tensor& t) { return silu(t); }, [](double x) { return x * RefSigmoid(x); }, 0, 0},
      {"softplus", [](const Tensor& t) { return softplus(t); },
       [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); }, 0, 0},
      {"relu", [](const Tensor& t) { return relu(t); }, [](double x) { return x > 0 ? x : 0.0; }, 0, 0},
      {"abs", [](const Tensor& t) { return abs(t); }, [](double x) { return std::fabs(x); }, 0, 0},
      {"sin", [](const Tensor& t) { return sin(t); }, [](double x) { return std::sin(x); }, 0, 0},
      {"cos", [](const Tensor& t) { return cos(t); }, [](double x) { return std::cos(x); }, 0, 0},
      {"expm1", [](const Tensor& t) { return expm1(t); }, [](double x) { return std::expm1(x); }, 0, 0},
      {"leaky_relu", [](const Tensor& t) { return leaky_relu(t, 0.1); }, [](double x) { return x > 0 ? x : 0.1 * x; },
       0, 0},
      {"elu", [](const Tensor& t) { return elu(t); }, [](double x) { return x > 0 ? x : std::expm1(x); }, 1e-7, 1e-15},
  };
}

}  // namespace

TEST(UnaryMath, Float32AgainstFloat64Reference) {
  std::vector<float> in32(kUnaryInputs.begin(), kUnaryInputs.end());
  Tensor x = F32(in32);
  for (const UnaryCase& uc : UnaryCases()) {
    Tensor y = uc.op(x);
    EXPECT_EQ(y.dtype(), kFloat32) << uc.name;
    std::vector<double> want;
    for (float v : in32) want.push_back(uc.ref(static_cast<double>(v)));
    // 1e-5 relative is ~80 ulp of float32: generous for exp/log-class functions (PyTorch's
    // vectorised implementations are within a few ulp).
    ExpectClose(Vals(y), want, 1e-5, std::max(uc.atol32, 1e-30), uc.name);
  }
}

TEST(UnaryMath, Float64AgainstFloat64Reference) {
  Tensor x = F64(kUnaryInputs);
  for (const UnaryCase& uc : UnaryCases()) {
    Tensor y = uc.op(x);
    EXPECT_EQ(y.dtype(), kFloat64) << uc.name;
    std::vector<double> want;
    for (double v : kUnaryInputs) want.push_back(uc.ref(v));
    ExpectClose(Vals(y), want, 1e-12, std::max(uc.atol64, 1e-300), uc.name);
  }
}

// Regression: float32 erf was Abramowitz & Stegun 7.1.26 (|abs error| < 1.5e-7), computing
// 1 - p(t) * exp(-x^2), which cancels for small |x|: erf(1e-6) gave 1.19e-6 (true 1.128e-6),
// erf(1e-20) gave 0. PyTorch's float erf is accurate to a few ulp everywhere.
TEST(UnaryMath, ErfFloat32RelativeAccuracyNearZero) {
  std::vector<float> in = {-1e-3f, -1e-6f, -1e-20f, 1e-20f, 1e-6f, 1e-4f, 1e-3f, 0.01f, 0.05f};
  std::vector<double> want;
  for (float v : in) want.push_back(std::erf(static_cast<double>(v)));
  ExpectClose(Vals(erf(F32(in))), want, 1e-5, 1e-30, "erf near 0");
}

TEST(UnaryMath, ErfAndGeluExactAtZeroAndOddSymmetry) {
  Tensor z = F32({0.0f});
  EXPECT_EQ(erf(z).item<double>(), 0.0);
  EXPECT_EQ(gelu(z).item<double>(), 0.0);
  EXPECT_EQ(tanh(z).item<double>(), 0.0);
  EXPECT_EQ(sigmoid(z).item<double>(), 0.5);
  Tensor x = F32({0.3f, 1.7f, 4.0f});
  EXPECT_TRUE(equal(erf(-x), -erf(x)));
  EXPECT_TRUE(equal(tanh(-x), -tanh(x)));
}

TEST(UnaryMath, LogFamilyOnPositiveRange) {
  std::vector<double> in = {1e-30, 1e-20, 1e-6, 1e-3, 0.1, 0.5, 1, 2, 10, 1e6, 1e30};
  std::vector<float> in32(in.begin(), in.end());
  Tensor x = F32(in32);
  std::vector<double> wl, ws, wr, w1p;
  for (float v : in32) {
    wl.push_back(std::log(static_cast<double>(v)));
    ws.push_back(std::sqrt(static_cast<double>(v)));
    wr.push_back(1.0 / std::sqrt(static_cast<double>(v)));
    w1p.push_back(std::log1p(static_cast<double>(v)));
  }
  ExpectClose(Vals(log(x)), wl, 1e-6, 1e-30, "log");
  ExpectClose(Vals(sqrt(x)), ws, 1e-6, 1e-30, "sqrt");
  ExpectClose(Vals(rsqrt(x)), wr, 1e-6, 1e-30, "rsqrt");
  ExpectClose(Vals(log1p(x)), w1p, 1e-6, 1e-30, "log1p");
}

TEST(UnaryMath, SpecialValues) {
  Tensor x = F32({static_cast<float>(kInf), static_cast<float>(-kInf), static_cast<float>(kNaN), 100.0f, -100.0f});
  std::vector<double> e = Vals(exp(x));
  EXPECT_EQ(e[0], kInf);
  EXPECT_EQ(e[1], 0.0);
  EXPECT_TRUE(std::isnan(e[2]));
  EXPECT_EQ(e[3], kInf);  // exp(100) overflows float32
  EXPECT_GE(e[4], 0.0);
  EXPECT_LT(e[4], 1e-40);
  std::vector<double> s = Vals(sigmoid(x));
  EXPECT_EQ(s[0], 1.0);
  EXPECT_EQ(s[1], 0.0);
  EXPECT_TRUE(std::isnan(s[2]));
  std::vector<double> t = Vals(tanh(x));
  EXPECT_EQ(t[0], 1.0);
  EXPECT_EQ(t[1], -1.0);
  EXPECT_TRUE(std::isnan(t[2]));
  EXPECT_EQ(t[3], 1.0);
  std::vector<double> l = Vals(log(F32({0.0f, -1.0f})));
  EXPECT_EQ(l[0], -kInf);
  EXPECT_TRUE(std::isnan(l[1]));
  EXPECT_TRUE(std::isnan(relu(F32({static_cast<float>(kNaN)})).item<double>()));
  EXPECT_EQ(Bools(isfinite(x)), (std::vector<bool>{false, false, false, true, true}));
}

TEST(UnaryMath, IntegerInputsComputeInFloat32) {
  Tensor i = I64({0, 1, 2});
  Tensor e = exp(i);
  EXPECT_EQ(e.dtype(), kFloat32);
  ExpectClose(Vals(e), {1, std::exp(1.0), std::exp(2.0)}, 1e-6, 0);
  EXPECT_EQ(sqrt(i).dtype(), kFloat32);
  EXPECT_EQ(abs(I64({-3, 2})).dtype(), kInt64);
  EXPECT_EQ(Longs(abs(I64({-3, 2}))), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(Longs(neg(I64({-3, 2}))), (std::vector<int64_t>{3, -2}));
  EXPECT_EQ(Longs(sign(I64({-3, 0, 2}))), (std::vector<int64_t>{-1, 0, 1}));
}

TEST(UnaryMath, RoundingAndPowAndClamp) {
  Tensor x = F32({-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 1.7f, -1.7f});
  // round: half to even (PyTorch / IEEE).
  EXPECT_EQ(Vals(round(x)), (std::vector<double>{-2, -2, -0, 0, 2, 2, 2, -2}));
  EXPECT_EQ(Vals(floor(x)), (std::vector<double>{-3, -2, -1, 0, 1, 2, 1, -2}));
  EXPECT_EQ(Vals(ceil(x)), (std::vector<double>{-2, -1, -0, 1, 2, 3, 2, -1}));
  EXPECT_EQ(Vals(trunc(x)), (std::vector<double>{-2, -1, -0, 0, 1, 2, 1, -1}));
  Tensor p = F32({1, 2, 3});
  EXPECT_EQ(Vals(pow(p, 2)), (std::vector<double>{1, 4, 9}));
  ExpectClose(Vals(pow(p, 0.5)), {1, std::sqrt(2.0), std::sqrt(3.0)}, 1e-6, 0);
  ExpectClose(Vals(pow(p, -1)), {1, 0.5, 1.0 / 3}, 1e-6, 0);
  EXPECT_EQ(Vals(pow(2, p)), (std::vector<double>{2, 4, 8}));
  EXPECT_EQ(Vals(pow(p, F32({3, 2, 1}))), (std::vector<double>{1, 4, 3}));
  EXPECT_EQ(Longs(pow(I64({2, 3}), 3)), (std::vector<int64_t>{8, 27}));
  EXPECT_EQ(pow(I64({2, 3}), 0.5).dtype(), kFloat32);
  EXPECT_EQ(Vals(square(F32({-3, 2}))), (std::vector<double>{9, 4}));
  EXPECT_EQ(Vals(clamp(x, -1, 1)), (std::vector<double>{-1, -1, -0.5, 0.5, 1, 1, 1, -1}));
  EXPECT_EQ(Vals(clamp(x, std::nullopt, 0)), (std::vector<double>{-2.5, -1.5, -0.5, 0, 0, 0, 0, -1.7f}));
  EXPECT_EQ(Longs(clamp(I64({-5, 0, 5}), -1, 1)), (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(Vals(reciprocal(F32({2, 4}))), (std::vector<double>{0.5, 0.25}));
}

// Regression: integer pow with a negative *tensor* exponent returned 1 for every base.
// PyTorch (ATen's powi) gives 1 for base 1, +-1 for base -1 (by parity), else 0.
TEST(BinaryMath, IntegerPowWithNegativeTensorExponent) {
  Tensor base = I64({2, 1, -1, -1, 3, 0, -2});
  Tensor ex = I64({-1, -5, -1, -2, 0, 2, 3});
  EXPECT_EQ(Longs(pow(base, ex)), (std::vector<int64_t>{0, 1, -1, 1, 1, 0, -8}));
}

TEST(BinaryMath, IntegerPowWithNonNegativeTensorExponent) {
  EXPECT_EQ(Longs(pow(I64({2, 3, -2, 0, 5}), I64({3, 2, 3, 0, 1}))), (std::vector<int64_t>{8, 9, -8, 1, 5}));
}

// Regression: allclose treated NaN as close to NaN; torch.allclose has
// equal_nan=False by default, so a NaN anywhere makes it false. (Tests that compare with
// allclose would not notice NaN results.)
TEST(BinaryMath, AllcloseNaNIsNotClose) {
  Tensor n = F32({1, static_cast<float>(kNaN)});
  EXPECT_FALSE(allclose(n, n));
  EXPECT_FALSE(n.allclose(F32({1, static_cast<float>(kNaN)})));
}

TEST(BinaryMath, AllcloseAndEqual) {
  Tensor a = F32({1, 2, 3});
  EXPECT_TRUE(allclose(a, a + 1e-7));
  EXPECT_FALSE(allclose(a, a + 1e-3));
  EXPECT_TRUE(allclose(a, a + 1e-3, 1e-2));
  EXPECT_TRUE(allclose(a, a + 0.5, 0, 0.5));
  EXPECT_FALSE(allclose(F32({0}), F32({1e-7f})));  // atol 1e-8
  EXPECT_TRUE(equal(a, F32({1, 2, 3})));
  EXPECT_FALSE(equal(a, F32({1, 2, 4})));
  EXPECT_FALSE(equal(a, F32({1, 2, 3, 4})));
  EXPECT_FALSE(equal(a, a.view({3, 1})));
  EXPECT_TRUE(a.equal(a.clone()));
}

TEST(BinaryMath, MaximumRemainderAtan2) {
  Tensor a = F32({1, 5, -3});
  Tensor b = F32({2, 4, -4});
  EXPECT_EQ(Vals(maximum(a, b)), (std::vector<double>{2, 5, -3}));
  EXPECT_EQ(Vals(minimum(a, b)), (std::vector<double>{1, 4, -4}));
  // Python's %: the result has the divisor's sign.
  EXPECT_EQ(Vals(remainder(F32({5, -5, 5, -5}), F32({3, 3, -3, -3}))), (std::vector<double>{2, 1, -1, -2}));
  EXPECT_EQ(Longs(remainder(I64({5, -5, 5, -5}), I64({3, 3, -3, -3}))), (std::vector<int64_t>{2, 1, -1, -2}));
  ExpectClose(Vals(atan2(F32({1, -1}), F32({-1, -1}))), {std::atan2(1.0, -1.0), std::atan2(-1.0, -1.0)}, 1e-6, 0);
  // NaN propagates through maximum (PyTorch).
  EXPECT_TRUE(std::isnan(maximum(F32({static_cast<float>(kNaN)}), F32({1})).item<double>()));
  EXPECT_EQ(Vals(lerp(F32({0, 10}), F32({10, 20}), 0.25)), (std::vector<double>{2.5, 12.5}));
  EXPECT_EQ(Vals(addcmul(F32({1, 1}), F32({2, 3}), F32({4, 5}), 0.5)), (std::vector<double>{5, 8.5}));
  EXPECT_EQ(Vals(addcdiv(F32({1, 1}), F32({2, 3}), F32({4, 6}), 2)), (std::vector<double>{2, 2}));
}

// ====================================================================== reductions

TEST(Where, BroadcastAndScalars) {
  Tensor c = Bool({true, false, true});
  Tensor a = F32({1, 2, 3});
  Tensor b = F32({-1}, IntArray{1});
  EXPECT_EQ(Vals(where(c, a, b)), (std::vector<double>{1, -1, 3}));
  EXPECT_EQ(Vals(where(c, a, 0.5)), (std::vector<double>{1, 0.5, 3}));
  EXPECT_EQ(Vals(where(c, 7, a)), (std::vector<double>{7, 2, 7}));
  Tensor s = where(c, 1.0, 2.0);
  EXPECT_EQ(Vals(s), (std::vector<double>{1, 2, 1}));
  // Condition [2, 1] against [3] operands -> [2, 3].
  Tensor c2 = Bool({true, false}, IntArray{2, 1});
  Tensor r = where(c2, a, F32({10, 20, 30}));
  EXPECT_EQ(r.sizes(), (IntArray{2, 3}));
  EXPECT_EQ(Vals(r), (std::vector<double>{1, 2, 3, 10, 20, 30}));
  // Mixed dtypes promote.
  Tensor m = where(c, I64({1, 2, 3}), F64({0.5, 0.5, 0.5}));
  EXPECT_EQ(m.dtype(), kFloat64);
  EXPECT_EQ(Vals(m), (std::vector<double>{1, 0.5, 3}));
  EXPECT_EQ(where(c, I64({1, 2, 3}), 0).dtype(), kInt64);
}

// Every row that divides integers checks its divisor in the kernel (the ANVIL_DIVIDING rows),
// in-place forms included; float division by zero is IEEE's inf / nan, not an error.
TEST(Division, IntegerDivisionByZeroIsAnErrorForEveryDividingRow) {
  const Tensor a = tensor({7, -7, 3}), zero = tensor({2, 0, 1});
  EXPECT_THAT(ErrorOf([&] { remainder(a, zero); }), HasSubstr("ZeroDivisionError: integer remainder by zero"));
  EXPECT_THAT(ErrorOf([&] { fmod(a, zero); }), HasSubstr("ZeroDivisionError: integer fmod by zero"));
  EXPECT_THAT(ErrorOf([&] { floor_divide(a, zero); }), HasSubstr("ZeroDivisionError: integer floor_divide by zero"));
  EXPECT_THAT(ErrorOf([&] { div(a, zero, "trunc"); }), HasSubstr("ZeroDivisionError: integer trunc_divide by zero"));
  Tensor b = a.clone();
  EXPECT_THAT(ErrorOf([&] { b.remainder_(zero); }), HasSubstr("ZeroDivisionError"));
  EXPECT_EQ(fmod(a, tensor({2, -4, 1})).to_vector<int64_t>(), (std::vector<int64_t>{1, -3, 0}));
  EXPECT_TRUE(std::isinf(div(a.to(kFloat32), zero.to(kFloat32), "floor").to_vector<float>()[1]));
}
