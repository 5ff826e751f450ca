// Forward values of the engine's ops against references that do not come from the engine:
// float64 std:: math, naive loops, hand-worked examples (many from PyTorch's documentation)
// and PyTorch's documented semantics (type promotion, index shapes, NaN ordering, ...).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include "core/anvil.h"
#include "tests/core/test_util.h"

using namespace anvil;
using ::testing::HasSubstr;

using namespace anvil::test;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<int64_t> Longs(const Tensor& t) { return t.to_vector<int64_t>(); }
std::vector<bool> Bools(const Tensor& t) {
  std::vector<uint8_t> u = t.to(kUInt8).to_vector<uint8_t>();
  return std::vector<bool>(u.begin(), u.end());
}

bool Close(double got, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double rtol = 1e-6,
                 double atol = 1e-6, const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(Close(got[i], want[i], rtol, atol))
        << what << " element " << i << ": got " << got[i] << ", want " << want[i];
  }
}

// Restores the thread count at scope exit.
struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

// Naive matrix product in double of a [n, k] and b [k, m] given as row-major vectors.
std::vector<double> NaiveMm(const std::vector<double>& a, const std::vector<double>& b, int64_t n,
                            int64_t k, int64_t m) {
  std::vector<double> c(n * m, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a[i * k + p] * b[p * m + j];
      c[i * m + j] = s;
    }
  return c;
}

}  // namespace

// ====================================================================== broadcasting

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
  EXPECT_EQ((i32 + 5).dtype(), kInt32);   // int scalar never widens
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
  EXPECT_THROW(i.add_(1.5), Error);   // float result can't go into an int tensor
  EXPECT_THROW(i.div_(2), Error);     // true division gives float
  i.add_(3);
  EXPECT_EQ(Longs(i), (std::vector<int64_t>{4, 5}));
}

// ====================================================================== non-contiguous inputs

TEST(NonContiguous, TransposedOperands) {
  Tensor a = Iota({3, 4});      // a[i][j] = 4i + j
  Tensor b = Iota({4, 3});      // b[i][j] = 3i + j
  Tensor s = a.t() + b;         // [4, 3]: a[j][i] + b[i][j]
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

const std::vector<double> kUnaryInputs = {-20, -10, -5, -3, -2, -1, -0.5, -0.1, -1e-3, -1e-6, -1e-20, 0,
                                          1e-20, 1e-6, 1e-3, 0.1, 0.5, 1, 2, 3, 5, 10, 20};

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
      {"gelu", [](const Tensor& t) { return gelu(t); },
       [rs2](double x) { return 0.5 * x * std::erfc(-x * rs2); }, 1e-6, 1e-15},
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
      {"leaky_relu", [](const Tensor& t) { return leaky_relu(t, 0.1); },
       [](double x) { return x > 0 ? x : 0.1 * x; }, 0, 0},
      {"elu", [](const Tensor& t) { return elu(t); }, [](double x) { return x > 0 ? x : std::expm1(x); },
       1e-7, 1e-15},
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
                Reduce3(xv, d, [](const std::vector<double>& v) {
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

// A single row times a matrix (batch-1 inference) runs as split matrix-vector products; both
// layouts of B (row-major, and a transposed Linear weight) against float64 sums.
TEST(Linalg, OneRowTimesAMatrixMatchesFloat64) {
  manual_seed(5);
  const int64_t k = 700, n = 1100;  // large enough for the parallel split
  const Tensor a = randn({1, k});
  const Tensor b = randn({k, n});
  const Tensor w = randn({n, k});
  // References from element-wise products and sums in float64, not from a matrix product.
  const Tensor a64 = a.to(kFloat64).t();  // [k, 1]
  const Tensor ref_b = (a64 * b.to(kFloat64)).sum({0}, true);
  const Tensor ref_w = (w.to(kFloat64) * a.to(kFloat64)).sum({1}).reshape({1, n});
  EXPECT_TRUE(allclose(mm(a, b).to(kFloat64), ref_b, 1e-4, 1e-3));
  EXPECT_TRUE(allclose(mm(a, w.t()).to(kFloat64), ref_w, 1e-4, 1e-3));
  EXPECT_TRUE(allclose(mm(a.to(kFloat64), w.to(kFloat64).t()), ref_w, 1e-10, 1e-10));
  // A strided row (a column of a transposed matrix) takes the general path.
  const Tensor at = randn({k, 1}).t();
  EXPECT_TRUE(allclose(mm(at, b).to(kFloat64), (at.to(kFloat64).t() * b.to(kFloat64)).sum({0}, true), 1e-4, 1e-3));
}

// mm_pair runs mid-sized products side by side on the pool (history off, 2+ threads). Each
// product is checked against float64 element-wise sums, not against another matrix product.
TEST(Linalg, MmPairSideBySideMatchesFloat64) {
  manual_seed(6);
  const int previous = get_num_threads();
  set_num_threads(2);
  const Tensor g = randn({256, 128}), w = randn({160, 128}), x = randn({256, 160});
  auto reference = [](const Tensor& a, const Tensor& b) {  // [m,k] x [k,n] as sum_p a[:,p,None]*b[None,p,:]
    return (a.to(kFloat64).unsqueeze(2) * b.to(kFloat64).unsqueeze(0)).sum({1});
  };
  for (bool history : {false, true}) {
    SCOPED_TRACE(history ? "history on (one after the other)" : "history off (side by side)");
    std::unique_ptr<NoGradGuard> no_grad;
    if (!history) no_grad = std::make_unique<NoGradGuard>();
    // Two products shaped like a Linear backward's, 5.2 M multiply-adds each (above the
    // size from which the CPU splits a product over the pool), transposed operands included.
    auto [dx, dw] = mm_pair(g, w.t(), g.t(), x);
    EXPECT_EQ(dx.sizes(), (IntArray{256, 160}));
    EXPECT_EQ(dw.sizes(), (IntArray{128, 160}));
    EXPECT_TRUE(allclose(dx.to(kFloat64), reference(g, w.t()), 1e-4, 1e-4));
    EXPECT_TRUE(allclose(dw.to(kFloat64), reference(g.t(), x), 1e-4, 1e-4));
  }
  // A bad pair reports mm's own error, from the pool thread that ran it.
  {
    NoGradGuard no_grad;
    const Tensor big = randn({96, 700});
    EXPECT_THAT(ErrorOf([&] { mm_pair(big, randn({700, 96}), big, randn({699, 96})); }),
                HasSubstr("cannot be multiplied"));
  }
  set_num_threads(previous);
}

// Linear's backward at a size where mm_pair takes both cores: gradients equal the float64
// formulas, and with create_graph the same backward still records a graph (double backward).
TEST(Linalg, LinearBackwardSideBySideMatchesFloat64AndStaysDifferentiable) {
  manual_seed(7);
  const int previous = get_num_threads();
  set_num_threads(2);
  const Tensor x = randn({256, 160});
  const Tensor w = (randn({128, 160}) * 0.1).requires_grad_();
  const Tensor up = randn({256, 128});
  const Tensor xi = x.detach().requires_grad_();
  (linear(xi, w) * up).sum().backward();
  const Tensor up64 = up.to(kFloat64), w64 = w.detach().to(kFloat64), x64 = x.to(kFloat64);
  const Tensor ref_dx = (up64.unsqueeze(2) * w64.unsqueeze(0)).sum({1});      // up w
  const Tensor ref_dw = (up64.unsqueeze(2) * x64.unsqueeze(1)).sum({0});      // up^T x
  EXPECT_TRUE(allclose(xi.grad().to(kFloat64), ref_dx, 1e-4, 1e-4));
  EXPECT_TRUE(allclose(w.grad().to(kFloat64), ref_dw, 1e-4, 1e-4));
  // Double backward: d/dw of sum((d loss / d x)^2) with loss = sum(linear(x, w) * up) is
  // 2 up^T (up w), a product of recorded gradients.
  const Tensor xj = x.detach().requires_grad_();
  const Tensor loss = (linear(xj, w) * up).sum();
  const auto gx = autograd::grad({loss}, {xj}, {}, /*retain_graph=*/true, /*create_graph=*/true);
  const Tensor w_grad = autograd::grad({(gx[0] * gx[0]).sum()}, {w})[0];
  const Tensor ref = (up64.unsqueeze(2) * ref_dx.unsqueeze(1)).sum({0}) * 2;
  EXPECT_TRUE(allclose(w_grad.to(kFloat64), ref, 1e-4, 1e-3));
  set_num_threads(previous);
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

TEST(Matmul, MmAgainstNaiveLoops) {
  manual_seed(21);
  Tensor a = randn({5, 7}, kFloat64), b = randn({7, 3}, kFloat64);
  ExpectClose(Vals(mm(a, b)), NaiveMm(Vals(a), Vals(b), 5, 7, 3), 1e-12, 1e-12, "mm f64");
  Tensor a32 = a.to(kFloat32), b32 = b.to(kFloat32);
  ExpectClose(Vals(a32.mm(b32)), NaiveMm(Vals(a32), Vals(b32), 5, 7, 3), 1e-5, 1e-5, "mm f32");
  // Transposed (non-contiguous) operands.
  Tensor at = randn({7, 5}, kFloat64), bt = randn({3, 7}, kFloat64);
  ExpectClose(Vals(mm(at.t(), bt.t())), NaiveMm(Vals(at.t()), Vals(bt.t()), 5, 7, 3), 1e-12, 1e-12, "mm t");
  // A strided slice operand.
  Tensor big = randn({10, 7}, kFloat64);
  Tensor sl = big.slice(0, 0, std::nullopt, 2);
  ExpectClose(Vals(mm(sl, b)), NaiveMm(Vals(sl), Vals(b), 5, 7, 3), 1e-12, 1e-12, "mm slice");
  // Integer matmul.
  Tensor ia = I64({1, 2, 3, 4}, IntArray{2, 2}), ib = I64({5, 6, 7, 8}, IntArray{2, 2});
  EXPECT_EQ(Longs(mm(ia, ib)), (std::vector<int64_t>{19, 22, 43, 50}));
}

TEST(Matmul, BmmAndBroadcastBatch) {
  manual_seed(22);
  Tensor a = randn({2, 3, 4}, kFloat64), b = randn({2, 4, 5}, kFloat64);
  Tensor c = bmm(a, b);
  EXPECT_EQ(c.sizes(), (IntArray{2, 3, 5}));
  std::vector<double> av = Vals(a), bv = Vals(b), want;
  for (int n = 0; n < 2; ++n) {
    std::vector<double> an(av.begin() + n * 12, av.begin() + (n + 1) * 12);
    std::vector<double> bn(bv.begin() + n * 20, bv.begin() + (n + 1) * 20);
    auto r = NaiveMm(an, bn, 3, 4, 5);
    want.insert(want.end(), r.begin(), r.end());
  }
  ExpectClose(Vals(c), want, 1e-12, 1e-12, "bmm");
  ExpectClose(Vals(matmul(a, b)), want, 1e-12, 1e-12, "matmul 3d");
  // Broadcast batch: [2, 1, 3, 4] @ [5, 4, 2] -> [2, 5, 3, 2].
  Tensor x = randn({2, 1, 3, 4}, kFloat64), y = randn({5, 4, 2}, kFloat64);
  Tensor z = matmul(x, y);
  ASSERT_EQ(z.sizes(), (IntArray{2, 5, 3, 2}));
  std::vector<double> xv = Vals(x), yv = Vals(y), zv = Vals(z);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 5; ++j) {
      std::vector<double> xi(xv.begin() + i * 12, xv.begin() + (i + 1) * 12);
      std::vector<double> yj(yv.begin() + j * 8, yv.begin() + (j + 1) * 8);
      auto r = NaiveMm(xi, yj, 3, 4, 2);
      for (int k = 0; k < 6; ++k) EXPECT_NEAR(zv[(i * 5 + j) * 6 + k], r[k], 1e-12);
    }
}

TEST(Matmul, VectorCasesFollowTorchMatmul) {
  Tensor v = F64({1, 2, 3});
  Tensor m = F64({1, 0, 2, 1, 0, 3, 1, 1, 1, 0, 0, 1}, IntArray{3, 4});  // [3, 4]
  Tensor d = matmul(v, v);
  EXPECT_EQ(d.dim(), 0);
  EXPECT_EQ(d.item<double>(), 14);
  EXPECT_EQ(dot(v, v).item<double>(), 14);
  Tensor vm = matmul(v, m);  // [4]
  EXPECT_EQ(vm.sizes(), (IntArray{4}));
  EXPECT_EQ(Vals(vm), (std::vector<double>{4, 6, 4, 6}));
  Tensor w = F64({1, 1, 1, 1});
  Tensor mv = matmul(m, w);  // [3]
  EXPECT_EQ(mv.sizes(), (IntArray{3}));
  EXPECT_EQ(Vals(mv), (std::vector<double>{4, 5, 2}));
  // Batched matrix @ vector: [2, 3, 4] @ [4] -> [2, 3].
  Tensor bm = stack({m, m * 2});
  Tensor bmv = matmul(bm, w);
  EXPECT_EQ(bmv.sizes(), (IntArray{2, 3}));
  EXPECT_EQ(Vals(bmv), (std::vector<double>{4, 5, 2, 8, 10, 4}));
  // Vector @ batched matrix: [3] @ [2, 3, 4] -> [2, 4].
  Tensor vbm = matmul(v, bm);
  EXPECT_EQ(vbm.sizes(), (IntArray{2, 4}));
  EXPECT_EQ(Vals(vbm), (std::vector<double>{4, 6, 4, 6, 8, 12, 8, 12}));
  // Batched @ matrix with a non-contiguous left operand.
  Tensor left = bm.transpose(1, 2).contiguous().transpose(1, 2);  // same values, strided
  EXPECT_FALSE(left.is_contiguous());
  Tensor r = matmul(left, m.t());
  EXPECT_EQ(r.sizes(), (IntArray{2, 3, 3}));
  EXPECT_TRUE(allclose(r, matmul(bm, m.t().contiguous())));
  EXPECT_EQ(Vals(outer(F64({1, 2}), F64({3, 4, 5}))), (std::vector<double>{3, 4, 5, 6, 8, 10}));
}

TEST(Matmul, LinearAndAddmm) {
  Tensor x = F32({1, 2, 3, 4}, IntArray{2, 2});
  Tensor w = F32({1, 0, 0, 1, 1, 1}, IntArray{3, 2});  // [out=3, in=2]
  Tensor b = F32({0.5, -0.5, 1});
  EXPECT_EQ(Vals(linear(x, w, b)), (std::vector<double>{1.5, 1.5, 4, 3.5, 3.5, 8}));
  EXPECT_EQ(Vals(linear(x, w)), (std::vector<double>{1, 2, 3, 3, 4, 7}));
  Tensor c = ones({2, 2});
  EXPECT_EQ(Vals(addmm(c, x, x, 2, 0.5)), (std::vector<double>{5.5, 7, 9.5, 13}));
}

// The linear row (bias seeding the output, the product accumulated onto it) against float64
// sums: 1-D, 2-D and 3-D inputs, a transposed weight, float32 and float64, shapes that split
// over the pool and shapes that do not, and the gradients of all three operands against the
// composed mm + add.
TEST(Matmul, LinearRowMatchesFloat64AndTheComposedGradients) {
  manual_seed(31);
  struct Case {
    IntArray x;
    int64_t out;
    bool weight_transposed;
  };
  for (ScalarType dt : {kFloat32, kFloat64}) {
    for (const Case& k : {Case{{5}, 3, false}, Case{{7, 4}, 3, true}, Case{{2, 3, 6}, 5, false},
                          Case{{300, 64}, 48, false}, Case{{1, 33}, 17, true}, Case{{256, 128}, 10, false}}) {
      SCOPED_TRACE(std::string(dt == kFloat32 ? "float32 x " : "float64 x ") + shape_str(k.x) + " out " +
                   std::to_string(k.out));
      const int64_t in = k.x.back();
      const Tensor x = randn(k.x, dt).requires_grad_();
      const Tensor w = (k.weight_transposed ? randn({in, k.out}, dt).t() : randn({k.out, in}, dt)).detach().requires_grad_();
      const Tensor b = randn({k.out}, dt).requires_grad_();
      const Tensor y = linear(x, w, b);
      ASSERT_NE(y.grad_fn(), nullptr);
      if (k.x.size() == 2) {  // the others end in a view
        EXPECT_EQ(y.grad_fn()->name(), "LinearBackward");
      }
      IntArray want_shape = k.x;
      want_shape.back() = k.out;
      ASSERT_EQ(y.sizes(), want_shape);
      const std::vector<double> xv = Vals(x), wv = Vals(w.contiguous()), bv = Vals(b), yv = Vals(y);
      const int64_t rows = x.numel() / in;
      double worst = 0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < k.out; ++o) {
          double want = bv[o];
          for (int64_t i = 0; i < in; ++i) want += xv[r * in + i] * wv[o * in + i];
          worst = std::max(worst, std::abs(yv[r * k.out + o] - want) / (1 + std::abs(want)));
        }
      }
      EXPECT_LT(worst, dt == kFloat32 ? 1e-5 : 1e-12);
      const Tensor up = randn(want_shape, dt);
      const auto got = autograd::grad({y}, {x, w, b}, {up});
      const auto want = autograd::grad({matmul(x, w.t()) + b}, {x, w, b}, {up});
      const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(allclose(got[i], want[i], tol, tol)) << "gradient " << i;
    }
  }
  // Without a bias, or with a bias that only broadcasts, linear stays mm (+ add).
  const Tensor x = randn({4, 3});
  Tensor w = randn({2, 3});
  w.requires_grad_();
  EXPECT_EQ(linear(x, w).grad_fn()->name(), "MmBackward");
  const Tensor b2 = randn({4, 1});
  EXPECT_TRUE(allclose(linear(x, w, b2), matmul(x, w.t()) + b2));
  // A wrong-sized bias is the add's broadcasting error, naming both shapes.
  EXPECT_THROW(linear(x, w, randn({3})), Error);
  // Integer operands take the composed path inside the kernel.
  const Tensor xi = I64({1, 2, 3, 4}, IntArray{2, 2}), wi = I64({1, 0, 1, 1}, IntArray{2, 2}), bi = I64({10, 20});
  EXPECT_EQ(Vals(linear(xi, wi, bi)), (std::vector<double>{11, 23, 13, 27}));
}

// linear_relu is relu(linear(...)) in one op: bitwise the same values (the relu epilogue runs
// on each thread's rows after its GEMM) and the same gradients, in every dtype path, with a
// NaN passing through as the relu lets it.
TEST(Matmul, LinearReluIsReluOfLinear) {
  manual_seed(37);
  for (ScalarType dt : {kFloat32, kFloat64}) {
    for (const IntArray& shape : {IntArray{7}, IntArray{9, 5}, IntArray{2, 4, 5}, IntArray{256, 64}}) {
      SCOPED_TRACE(shape_str(shape));
      const int64_t in = shape.back();
      const Tensor x = randn(shape, dt).requires_grad_(), w = randn({24, in}, dt).requires_grad_();
      const Tensor b = randn({24}, dt).requires_grad_();
      const Tensor fused = linear_relu(x, w, b), plain = relu(linear(x, w, b));
      EXPECT_TRUE(equal(fused, plain));
      const Tensor up = randn(plain.sizes(), dt);
      const auto g1 = autograd::grad({fused}, {x, w, b}, {up});
      const auto g2 = autograd::grad({plain}, {x, w, b}, {up});
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(equal(g1[i], g2[i])) << "gradient " << i;
    }
  }
  Tensor x = randn({2, 3});
  x.select(0, 1).fill_(NAN);
  const std::vector<double> y = Vals(linear_relu(x, randn({4, 3}), randn({4})));
  for (int j = 4; j < 8; ++j) EXPECT_TRUE(std::isnan(y[j]));
  const Tensor xi = I64({1, -2, 3, 4}, IntArray{2, 2}), wi = I64({1, 0, 1, 1}, IntArray{2, 2}), bi = I64({0, 0});
  EXPECT_EQ(Vals(linear_relu(xi, wi, bi)), (std::vector<double>{1, 0, 3, 7}));
}

// ====================================================================== softmax

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
  ExpectClose(s, {1 / z, std::exp(1.0) / z, std::exp(2.0) / z, std::exp(2.0) / z, std::exp(1.0) / z, 1 / z},
              1e-5, 1e-7, "softmax large");
  std::vector<double> l = Vals(log_softmax(x, 1));
  for (double v : l) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NEAR(l[2], 2 - std::log(z), 1e-4);
  // -inf logits get probability 0.
  std::vector<double> m = Vals(softmax(F32({0, -INFINITY, 0}), 0));
  EXPECT_EQ(m[1], 0.0);
  EXPECT_NEAR(m[0], 0.5, 1e-7);
  // Integer input computes in float32.
  EXPECT_EQ(softmax(I64({1, 2}), 0).dtype(), kFloat32);
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

TEST(Joining, CatStack) {
  Tensor a = Iota({2, 3});
  Tensor b = Iota({1, 3}) + 100;
  Tensor c0 = cat({a, b}, 0);
  EXPECT_EQ(c0.sizes(), (IntArray{3, 3}));
  EXPECT_EQ(Vals(c0), (std::vector<double>{0, 1, 2, 3, 4, 5, 100, 101, 102}));
  Tensor c1 = cat({a, Iota({2, 1}) + 10}, 1);
  EXPECT_EQ(Vals(c1), (std::vector<double>{0, 1, 2, 10, 3, 4, 5, 11}));
  EXPECT_EQ(Vals(cat({a, a.t().t()}, -1)).size(), 12u);
  // Non-contiguous inputs.
  EXPECT_EQ(Vals(cat({a.t(), a.t()}, 1)), (std::vector<double>{0, 3, 0, 3, 1, 4, 1, 4, 2, 5, 2, 5}));
  // dtype promotion across inputs (PyTorch's cat promotes).
  Tensor mixed = cat({I64({1, 2}), F32({0.5})});
  EXPECT_EQ(mixed.dtype(), kFloat32);
  EXPECT_EQ(Vals(mixed), (std::vector<double>{1, 2, 0.5}));
  // Legacy: 1-D empty tensors are skipped.
  EXPECT_EQ(cat({a, zeros({0})}, 0).sizes(), (IntArray{2, 3}));
  // Result is new memory.
  EXPECT_FALSE(c0.is_alias_of(a));
  Tensor s0 = stack({F32({1, 2}), F32({3, 4}), F32({5, 6})});
  EXPECT_EQ(s0.sizes(), (IntArray{3, 2}));
  EXPECT_EQ(Vals(s0), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  Tensor s1 = stack({F32({1, 2}), F32({3, 4}), F32({5, 6})}, 1);
  EXPECT_EQ(s1.sizes(), (IntArray{2, 3}));
  EXPECT_EQ(Vals(s1), (std::vector<double>{1, 3, 5, 2, 4, 6}));
  EXPECT_EQ(stack({a, a}, -1).sizes(), (IntArray{2, 3, 2}));
}

TEST(Joining, SplitChunk) {
  Tensor x = Iota({5, 2});
  auto s = split(x, 2);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].sizes(), (IntArray{2, 2}));
  EXPECT_EQ(s[2].sizes(), (IntArray{1, 2}));
  EXPECT_EQ(Vals(s[1]), (std::vector<double>{4, 5, 6, 7}));
  auto sw = split_with_sizes(x, {1, 4});
  ASSERT_EQ(sw.size(), 2u);
  EXPECT_EQ(Vals(sw[0]), (std::vector<double>{0, 1}));
  EXPECT_EQ(sw[1].sizes(), (IntArray{4, 2}));
  auto c = chunk(x, 3);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].size(0), 2);
  EXPECT_EQ(c[2].size(0), 1);
  // torch.chunk(6 rows, 4) gives 3 chunks of 2: chunks may be fewer than asked.
  auto c6 = chunk(Iota({6}), 4);
  ASSERT_EQ(c6.size(), 3u);
  for (const Tensor& t : c6) EXPECT_EQ(t.numel(), 2);
  auto cols = split(x, 1, 1);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(Vals(cols[1]), (std::vector<double>{1, 3, 5, 7, 9}));
  EXPECT_EQ(Vals(cat(s, 0)), Vals(x));
}

// ====================================================================== gather / scatter / index_select

TEST(Indexing, GatherDocExample) {
  // torch.gather docs: t = [[1, 2], [3, 4]]; gather(t, 1, [[0, 0], [1, 0]]) = [[1, 1], [4, 3]].
  Tensor t = F32({1, 2, 3, 4}, IntArray{2, 2});
  Tensor idx = I64({0, 0, 1, 0}, IntArray{2, 2});
  EXPECT_EQ(Vals(gather(t, 1, idx)), (std::vector<double>{1, 1, 4, 3}));
  EXPECT_EQ(Vals(t.gather(0, I64({1, 0}, IntArray{1, 2}))), (std::vector<double>{3, 2}));
  // Index smaller than input in the other dim.
  Tensor x = Iota({3, 4});
  Tensor g = gather(x, 1, I64({3, 0}, IntArray{2, 1}));
  EXPECT_EQ(g.sizes(), (IntArray{2, 1}));
  EXPECT_EQ(Vals(g), (std::vector<double>{3, 4}));
  // Non-contiguous input.
  EXPECT_EQ(Vals(gather(x.t(), 0, I64({2, 1, 0}, IntArray{1, 3}))), (std::vector<double>{2, 5, 8}));
  // int32 index is accepted.
  EXPECT_EQ(Vals(gather(t, 1, idx.to(kInt32))), (std::vector<double>{1, 1, 4, 3}));
}

TEST(Indexing, ScatterDocExample) {
  // torch.Tensor.scatter_ docs: src = arange(1, 11).reshape(2, 5), index = [[0, 1, 2, 0]],
  // zeros(3, 5).scatter_(0, index, src) = [[1,0,0,4,0],[0,2,0,0,0],[0,0,3,0,0]].
  Tensor src = (Iota({2, 5}) + 1);
  Tensor index = I64({0, 1, 2, 0}, IntArray{1, 4});
  Tensor out = scatter(zeros({3, 5}), 0, index, src);
  EXPECT_EQ(Vals(out), (std::vector<double>{1, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0}));
  // Docs, dim 1: index [[0, 1, 2], [0, 1, 4]] -> [[1,2,3,0,0],[6,7,0,0,8],[0,0,0,0,0]].
  Tensor out1 = scatter(zeros({3, 5}), 1, I64({0, 1, 2, 0, 1, 4}, IntArray{2, 3}), src);
  EXPECT_EQ(Vals(out1), (std::vector<double>{1, 2, 3, 0, 0, 6, 7, 0, 0, 8, 0, 0, 0, 0, 0}));
  // Scalar value form.
  EXPECT_EQ(Vals(scatter(zeros({4}), 0, I64({1, 3}), 2.5)), (std::vector<double>{0, 2.5, 0, 2.5}));
  // In-place form writes self.
  Tensor z = zeros({3, 5});
  z.scatter_(0, index, src);
  EXPECT_EQ(Vals(z), Vals(out));
}

TEST(Indexing, ScatterAddAccumulatesDuplicates) {
  Tensor r = scatter_add(zeros({5}), 0, I64({0, 1, 0, 4}), F32({1, 2, 3, 4}));
  EXPECT_EQ(Vals(r), (std::vector<double>{4, 2, 0, 0, 4}));
  Tensor base = ones({2, 3});
  base.scatter_add_(1, I64({2, 2, 0, 1}, IntArray{2, 2}), F32({1, 2, 3, 4}, IntArray{2, 2}));
  EXPECT_EQ(Vals(base), (std::vector<double>{1, 1, 4, 4, 5, 1}));
}

TEST(Indexing, IndexSelect) {
  Tensor x = Iota({3, 4});
  Tensor r = index_select(x, 0, I64({2, 0, 2}));
  EXPECT_EQ(r.sizes(), (IntArray{3, 4}));
  EXPECT_EQ(Vals(r), (std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11}));
  Tensor c = x.index_select(1, I64({3, 1}));
  EXPECT_EQ(Vals(c), (std::vector<double>{3, 1, 7, 5, 11, 9}));
  EXPECT_EQ(Vals(index_select(x.t(), 0, I64({1}))), (std::vector<double>{1, 5, 9}));
  EXPECT_EQ(Vals(index_select(x, -1, I64({0}))), (std::vector<double>{0, 4, 8}));
  EXPECT_EQ(index_select(x, 0, I64({})).sizes(), (IntArray{0, 4}));
  EXPECT_FALSE(r.is_alias_of(x));
}

TEST(Indexing, IndexAddDocExample) {
  // torch.Tensor.index_add_ docs.
  Tensor x = ones({5, 3});
  Tensor t = F32({1, 2, 3, 4, 5, 6, 7, 8, 9}, IntArray{3, 3});
  x.index_add_(0, I64({0, 4, 2}), t);
  EXPECT_EQ(Vals(x), (std::vector<double>{2, 3, 4, 1, 1, 1, 8, 9, 10, 1, 1, 1, 5, 6, 7}));
  // Duplicates accumulate; alpha scales.
  Tensor y = index_add(zeros({3}), 0, I64({1, 1, 2}), F32({1, 2, 3}), 2);
  EXPECT_EQ(Vals(y), (std::vector<double>{0, 6, 6}));
  // Along dim 1.
  Tensor z = index_add(zeros({2, 3}), 1, I64({2, 0}), F32({1, 2, 3, 4}, IntArray{2, 2}));
  EXPECT_EQ(Vals(z), (std::vector<double>{2, 0, 1, 4, 0, 3}));
}

// ====================================================================== advanced indexing

TEST(AdvancedIndexing, NonAdjacentIndexDimsGoFirst) {
  Tensor x = Iota({5, 6, 7});
  Tensor idx = I64({0, 2, 4}), idx2 = I64({1, 3, 5});
  Tensor r = x.index({idx, Slice(), idx2});  // PyTorch: [3, 6]
  ASSERT_EQ(r.sizes(), (IntArray{3, 6}));
  std::vector<double> rv = Vals(r);
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 6; ++j) {
      const int64_t a = Longs(idx)[k], c = Longs(idx2)[k];
      EXPECT_EQ(rv[k * 6 + j], a * 42 + j * 7 + c);
    }
}

TEST(AdvancedIndexing, AdjacentIndexDimsStayInPlace) {
  Tensor x = Iota({5, 6, 7});
  Tensor idx = I64({0, 2, 5}), idx2 = I64({1, 3, 6});
  Tensor r = x.index({Slice(), idx, idx2});  // PyTorch: [5, 3]
  ASSERT_EQ(r.sizes(), (IntArray{5, 3}));
  std::vector<double> rv = Vals(r);
  for (int i = 0; i < 5; ++i)
    for (int k = 0; k < 3; ++k) EXPECT_EQ(rv[i * 3 + k], i * 42 + Longs(idx)[k] * 7 + Longs(idx2)[k]);
  // One index tensor in the middle: [5, 2, 7].
  Tensor m = x.index({Slice(), I64({5, 0})});
  ASSERT_EQ(m.sizes(), (IntArray{5, 2, 7}));
  EXPECT_EQ(Vals(m)[(1 * 2 + 0) * 7 + 3], 1 * 42 + 5 * 7 + 3);
  // Leading index tensor: x[idx] -> [3, 6, 7].
  Tensor l = x.index({I64({4, 4, 1})});
  ASSERT_EQ(l.sizes(), (IntArray{3, 6, 7}));
  EXPECT_EQ(Vals(l)[(2 * 6 + 5) * 7 + 6], 1 * 42 + 5 * 7 + 6);
}

TEST(AdvancedIndexing, IndexTensorsBroadcast) {
  Tensor x = Iota({5, 6, 7});
  Tensor rows = I64({0, 3}, IntArray{2, 1});
  Tensor cols = I64({1, 2, 5});
  Tensor r = x.index({rows, cols});  // [2, 3, 7]
  ASSERT_EQ(r.sizes(), (IntArray{2, 3, 7}));
  std::vector<double> rv = Vals(r);
  const int64_t rr[2] = {0, 3}, cc[3] = {1, 2, 5};
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int k = 0; k < 7; ++k) EXPECT_EQ(rv[(a * 3 + b) * 7 + k], rr[a] * 42 + cc[b] * 7 + k);
  // Non-adjacent broadcast: x[rows, :, cols] -> [2, 3, 6].
  Tensor n = x.index({rows, Slice(), cols});
  ASSERT_EQ(n.sizes(), (IntArray{2, 3, 6}));
  EXPECT_EQ(Vals(n)[(1 * 3 + 2) * 6 + 4], 3 * 42 + 4 * 7 + 5);
  // The vectorised gather of coordinates: t[c[:,0], c[:,1], c[:,2]].
  Tensor coords = I64({0, 0, 0, 4, 5, 6, 2, 3, 1}, IntArray{3, 3});
  Tensor picked = x.index({coords.select(1, 0), coords.select(1, 1), coords.select(1, 2)});
  EXPECT_EQ(Vals(picked), (std::vector<double>{0, 4 * 42 + 5 * 7 + 6, 2 * 42 + 3 * 7 + 1}));
}

TEST(AdvancedIndexing, MixedWithSlicesAndNegativeIndices) {
  Tensor x = Iota({5, 6, 7});
  Tensor r = x.index({Slice(1, 4), I64({0, -1})});  // [3, 2, 7]; -1 means 5
  ASSERT_EQ(r.sizes(), (IntArray{3, 2, 7}));
  EXPECT_EQ(Vals(r)[(0 * 2 + 1) * 7 + 0], 1 * 42 + 5 * 7);
  EXPECT_EQ(Vals(r)[(2 * 2 + 0) * 7 + 6], 3 * 42 + 0 * 7 + 6);
  Tensor s = x.index({Slice(std::nullopt, std::nullopt, 2), Slice(), I64({6})});  // [3, 6, 1]
  EXPECT_EQ(s.sizes(), (IntArray{3, 6, 1}));
  EXPECT_EQ(Vals(s)[5 * 1 + 0 + 2 * 6], 4 * 42 + 5 * 7 + 6);
  // Ellipsis then an index tensor on the last dim.
  Tensor e = x.index({Ellipsis, I64({0, 6})});
  EXPECT_EQ(e.sizes(), (IntArray{5, 6, 2}));
  // Index result is a copy, not a view.
  EXPECT_FALSE(r.is_alias_of(x));
  // operator[] with a tensor.
  EXPECT_EQ(Vals(Iota({4})[I64({3, 3, 0})]), (std::vector<double>{3, 3, 0}));
  // 2-D index tensor on a 1-D tensor gives its shape.
  EXPECT_EQ(Iota({4}).index({I64({0, 1, 2, 3}, IntArray{2, 2})}).sizes(), (IntArray{2, 2}));
}

TEST(AdvancedIndexing, IntegersApplyAsSelectBeforeIndexTensors) {
  // PyTorch (unlike NumPy) applies integer indices as select() first, so x[1, :, idx] is
  // x[1][:, idx] with shape [6, len], and x[idx, 1] is x[:, 1][idx].
  Tensor x = Iota({5, 6, 7});
  Tensor idx = I64({0, 4});
  Tensor a = x.index({1, Slice(), idx});
  ASSERT_EQ(a.sizes(), (IntArray{6, 2}));
  EXPECT_EQ(Vals(a.select(0, 2)), (std::vector<double>{1 * 42 + 2 * 7 + 0, 1 * 42 + 2 * 7 + 4}));
  Tensor b = x.index({idx, 1});
  ASSERT_EQ(b.sizes(), (IntArray{2, 7}));
  EXPECT_EQ(Vals(b.select(1, 3)), (std::vector<double>{0 * 42 + 7 + 3, 4 * 42 + 7 + 3}));
  EXPECT_EQ(x.index({Slice(), idx, 1}).sizes(), (IntArray{5, 2}));
  EXPECT_EQ(x.index({Ellipsis, idx, Slice()}).sizes(), (IntArray{5, 2, 7}));
  // None inserts a dim before the indexed one.
  Tensor m = Iota({3, 4});
  EXPECT_EQ(m.index({None, I64({0, 2}), Ellipsis}).sizes(), (IntArray{1, 2, 4}));
  // Integer plus bool mask.
  Tensor mask = Bool({true, false, true, false});
  EXPECT_EQ(Vals(m.index({1, mask})), (std::vector<double>{4, 6}));
  EXPECT_EQ(Vals(m.index({Bool({true, false, true}), 1})), (std::vector<double>{1, 9}));
  Tensor y = zeros({3, 4});
  y.index_put_({1, mask}, Scalar(5.0));
  y.index_put_({I64({0, 2}), Slice(1, 3)}, F32({7, 8}));
  EXPECT_EQ(Vals(y), (std::vector<double>{0, 7, 8, 0, 5, 0, 5, 0, 0, 7, 8, 0}));
}

TEST(AdvancedIndexing, BoolMasks) {
  Tensor x = Iota({3, 4});
  Tensor m = x > 6.5;
  Tensor r = x.index({m});
  EXPECT_EQ(r.sizes(), (IntArray{5}));
  EXPECT_EQ(Vals(r), (std::vector<double>{7, 8, 9, 10, 11}));
  // A row mask.
  Tensor rows = x.index({Bool({true, false, true})});
  EXPECT_EQ(rows.sizes(), (IntArray{2, 4}));
  EXPECT_EQ(Vals(rows), (std::vector<double>{0, 1, 2, 3, 8, 9, 10, 11}));
  // A column mask after a slice.
  Tensor cols = x.index({Slice(), Bool({false, true, false, true})});
  EXPECT_EQ(cols.sizes(), (IntArray{3, 2}));
  EXPECT_EQ(Vals(cols), (std::vector<double>{1, 3, 5, 7, 9, 11}));
  // Mask with no hits.
  EXPECT_EQ(x.index({x > 100}).numel(), 0);
  EXPECT_EQ(Vals(x[x < 2]), (std::vector<double>{0, 1}));
}

TEST(AdvancedIndexing, IndexPutWithoutAndWithAccumulate) {
  Tensor x = zeros({5});
  x.index_put_({I64({0, 2})}, F32({7, 8}));
  EXPECT_EQ(Vals(x), (std::vector<double>{7, 0, 8, 0, 0}));
  // Duplicates without accumulate: one of the values lands (both equal here: well defined).
  Tensor y = zeros({3});
  y.index_put_({I64({1, 1})}, F32({4, 4}));
  EXPECT_EQ(Vals(y), (std::vector<double>{0, 4, 0}));
  // With accumulate, duplicates add up.
  Tensor z = zeros({3});
  index_put_(z, {I64({0, 0, 2, 0})}, F32({1, 2, 3, 4}), /*accumulate=*/true);
  EXPECT_EQ(Vals(z), (std::vector<double>{7, 0, 3}));
  // Accumulate adds to the existing content.
  Tensor w = ones({3});
  index_put_(w, {I64({2, 2})}, F32({1, 1}), true);
  EXPECT_EQ(Vals(w), (std::vector<double>{1, 1, 3}));
  // Out-of-place form leaves the input alone.
  Tensor o = index_put(ones({3}), {I64({1})}, F32({5}));
  EXPECT_EQ(Vals(o), (std::vector<double>{1, 5, 1}));
  // 2-D with two index tensors and a broadcast scalar value.
  Tensor m = zeros({3, 3});
  m.index_put_({I64({0, 1, 2}), I64({2, 1, 0})}, Scalar(1.0));
  EXPECT_EQ(Vals(m), (std::vector<double>{0, 0, 1, 0, 1, 0, 1, 0, 0}));
  // Rows assigned from a broadcast row.
  Tensor rows = zeros({3, 2});
  rows.index_put_({I64({2, 0})}, F32({5, 6}));
  EXPECT_EQ(Vals(rows), (std::vector<double>{5, 6, 0, 0, 5, 6}));
  // Bool mask assignment.
  Tensor b = Iota({4});
  b.index_put_({b > 1.5}, Scalar(0.0));
  EXPECT_EQ(Vals(b), (std::vector<double>{0, 1, 0, 0}));
  // Through a slice: x[1:3, idx] = v writes the base.
  Tensor base = zeros({4, 3});
  base.index_put_({Slice(1, 3), I64({0, 2})}, F32({1, 2, 3, 4}, IntArray{2, 2}));
  EXPECT_EQ(Vals(base), (std::vector<double>{0, 0, 0, 1, 0, 2, 3, 0, 4, 0, 0, 0}));
  // dtype of values is converted to self's.
  Tensor iv = zeros({3}, kInt64);
  iv.index_put_({I64({1})}, F32({2.0}));
  EXPECT_EQ(Longs(iv), (std::vector<int64_t>{0, 2, 0}));
}

TEST(AdvancedIndexing, AccumulateLargeRandomMatchesLoop) {
  manual_seed(4);
  Tensor idx = randint(0, 50, {5000});
  Tensor vals = rand({5000}, kFloat64);
  Tensor acc = zeros({50}, kFloat64);
  index_put_(acc, {idx}, vals, true);
  std::vector<double> want(50, 0.0);
  auto iv = Longs(idx);
  auto vv = Vals(vals);
  for (size_t i = 0; i < iv.size(); ++i) want[iv[i]] += vv[i];
  ExpectClose(Vals(acc), want, 1e-12, 1e-12, "index_put accumulate");
  // Same through scatter_add and index_add.
  ExpectClose(Vals(scatter_add(zeros({50}, kFloat64), 0, idx, vals)), want, 1e-12, 1e-12, "scatter_add");
  ExpectClose(Vals(index_add(zeros({50}, kFloat64), 0, idx, vals)), want, 1e-12, 1e-12, "index_add");
}

// ====================================================================== masks

TEST(Masks, MaskedFillSelect) {
  Tensor x = Iota({2, 3});
  Tensor m = Bool({true, false, true}, IntArray{1, 3});
  EXPECT_EQ(Vals(x.masked_fill(m, -1)), (std::vector<double>{-1, 1, -1, -1, 4, -1}));
  EXPECT_EQ(Vals(x), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  x.masked_fill_(x > 3, 0.5);
  EXPECT_EQ(Vals(x), (std::vector<double>{0, 1, 2, 3, 0.5, 0.5}));
  EXPECT_EQ(masked_fill(I64({1, 2}), Bool({true, false}), 9).dtype(), kInt64);
  Tensor y = Iota({2, 3});
  Tensor sel = y.masked_select(m);
  EXPECT_EQ(sel.sizes(), (IntArray{4}));
  EXPECT_EQ(Vals(sel), (std::vector<double>{0, 2, 3, 5}));
  EXPECT_EQ(Vals(masked_select(F32({1, 2, 3}), Bool({false, true, true}))), (std::vector<double>{2, 3}));
}

TEST(Masks, Nonzero) {
  Tensor x = F32({0, 1, 2, 0}, IntArray{2, 2});
  Tensor nz = x.nonzero();
  EXPECT_EQ(nz.dtype(), kInt64);
  EXPECT_EQ(nz.sizes(), (IntArray{2, 2}));
  EXPECT_EQ(Longs(nz), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(zeros({3, 2}).nonzero().sizes(), (IntArray{0, 2}));
  EXPECT_EQ(Longs(nonzero(Bool({false, true, true}))), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Longs(x.t().nonzero()), (std::vector<int64_t>{0, 1, 1, 0}));
  Tensor t3 = zeros({2, 2, 2});
  t3.index_put_({I64({1}), I64({0}), I64({1})}, Scalar(3.0));
  EXPECT_EQ(Longs(t3.nonzero()), (std::vector<int64_t>{1, 0, 1}));
}

// ====================================================================== sort / topk / one_hot

TEST(Sorting, SortArgsort) {
  Tensor x = F32({3, 1, 4, 1.5, 9, 2});
  auto [v, i] = sort(x);
  EXPECT_EQ(Vals(v), (std::vector<double>{1, 1.5, 2, 3, 4, 9}));
  EXPECT_EQ(Longs(i), (std::vector<int64_t>{1, 3, 5, 0, 2, 4}));
  auto [vd, id] = sort(x, 0, true);
  EXPECT_EQ(Vals(vd), (std::vector<double>{9, 4, 3, 2, 1.5, 1}));
  EXPECT_EQ(Longs(id), (std::vector<int64_t>{4, 2, 0, 5, 3, 1}));
  EXPECT_EQ(Longs(argsort(x)), Longs(i));
  // Along dim 0 of a matrix, and along the last dim.
  Tensor m = F32({3, 1, 2, 5, 0, 4}, IntArray{2, 3});
  auto [v0, i0] = sort(m, 0);
  EXPECT_EQ(Vals(v0), (std::vector<double>{3, 0, 2, 5, 1, 4}));
  EXPECT_EQ(Longs(i0), (std::vector<int64_t>{0, 1, 0, 1, 0, 1}));
  auto [v1, i1] = sort(m, -1);
  EXPECT_EQ(Vals(v1), (std::vector<double>{1, 2, 3, 0, 4, 5}));
  EXPECT_EQ(Longs(i1), (std::vector<int64_t>{1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(Longs(argsort(I64({5, -2, 7}), 0, true)), (std::vector<int64_t>{2, 0, 1}));
}

TEST(Sorting, NaNGoesLastAscendingFirstDescending) {
  Tensor x = F32({3, static_cast<float>(kNaN), 1, 2});
  auto [v, i] = sort(x);
  std::vector<double> vv = Vals(v);
  EXPECT_EQ(vv[0], 1);
  EXPECT_EQ(vv[1], 2);
  EXPECT_EQ(vv[2], 3);
  EXPECT_TRUE(std::isnan(vv[3]));
  EXPECT_EQ(Longs(i), (std::vector<int64_t>{2, 3, 0, 1}));
  auto [vd, idd] = sort(x, 0, true);
  std::vector<double> vdv = Vals(vd);
  EXPECT_TRUE(std::isnan(vdv[0]));
  EXPECT_EQ(vdv[1], 3);
  EXPECT_EQ(Longs(idd), (std::vector<int64_t>{1, 0, 3, 2}));
  // topk(largest) treats NaN as the largest.
  auto [tv, ti] = topk(x, 2);
  EXPECT_TRUE(std::isnan(Vals(tv)[0]));
  EXPECT_EQ(Vals(tv)[1], 3);
  EXPECT_EQ(Longs(ti), (std::vector<int64_t>{1, 0}));
}

TEST(Sorting, Topk) {
  Tensor x = F32({1, 5, 3, 4, 2});
  auto [v, i] = topk(x, 2);
  EXPECT_EQ(Vals(v), (std::vector<double>{5, 4}));
  EXPECT_EQ(Longs(i), (std::vector<int64_t>{1, 3}));
  auto [vs, is] = topk(x, 3, -1, /*largest=*/false);
  EXPECT_EQ(Vals(vs), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(Longs(is), (std::vector<int64_t>{0, 4, 2}));
  Tensor m = F32({1, 9, 3, 8, 2, 7}, IntArray{3, 2});
  auto [mv, mi] = topk(m, 1, 0);
  EXPECT_EQ(mv.sizes(), (IntArray{1, 2}));
  EXPECT_EQ(Vals(mv), (std::vector<double>{3, 9}));
  EXPECT_EQ(Longs(mi), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(std::get<0>(topk(x, 0)).numel(), 0);
}

TEST(Sorting, OneHot) {
  Tensor o = one_hot(I64({0, 2, 1}), 4);
  EXPECT_EQ(o.dtype(), kInt64);
  EXPECT_EQ(o.sizes(), (IntArray{3, 4}));
  EXPECT_EQ(Longs(o), (std::vector<int64_t>{1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0}));
  Tensor inferred = one_hot(I64({1, 3}));
  EXPECT_EQ(inferred.sizes(), (IntArray{2, 4}));
  EXPECT_EQ(one_hot(I64({0, 1, 1, 0}, IntArray{2, 2}), 2).sizes(), (IntArray{2, 2, 2}));
}

// ====================================================================== dtype conversion / copy_

TEST(Conversion, FloatToIntTruncatesTowardZero) {
  Tensor f = F32({-1.7f, -0.5f, 0.5f, 1.7f, 2.0f});
  Tensor i = f.to(kInt64);
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(Longs(i), (std::vector<int64_t>{-1, 0, 0, 1, 2}));
  EXPECT_EQ(Longs(f.to(kInt32)), (std::vector<int64_t>{-1, 0, 0, 1, 2}));
  // To bool: non-zero is true.
  EXPECT_EQ(Bools(F32({0, 0.5, -2}).to(kBool)), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(Vals(Bool({true, false}).to(kFloat32)), (std::vector<double>{1, 0}));
  // int64 -> uint8 wraps modulo 256.
  EXPECT_EQ(Longs(I64({300, 255, 256}).to(kUInt8)), (std::vector<int64_t>{44, 255, 0}));
  // Large int64 -> float64 exactly representable.
  EXPECT_EQ(I64({int64_t{1} << 52}).to(kFloat64).item<double>(), std::ldexp(1.0, 52));
}

TEST(Conversion, HalfAndBFloat16RoundTrip) {
  // Exactly representable values survive both ways.
  Tensor exact = F32({0.5f, -3.25f, 1024.0f, 0.0f, -0.0f, 65504.0f});
  EXPECT_EQ(Vals(exact.to(kFloat16).to(kFloat32)), Vals(exact));
  Tensor bexact = F32({0.5f, -3.25f, 1024.0f, 0.0f, 1.5f, 0x1p127f});
  EXPECT_EQ(Vals(bexact.to(kBFloat16).to(kFloat32)), Vals(bexact));
  // Round to nearest: 0.1 in float16 is 1638/16384 = 0.0999755859375; 1/3 in bfloat16 is
  // 171/512 = 0.333984375 (hand-computed from the 10- and 7-bit mantissas).
  EXPECT_EQ(F64({0.1}).to(kFloat16).item<double>(), 0.0999755859375);
  EXPECT_EQ(F64({1.0 / 3}).to(kBFloat16).item<double>(), 0.333984375);
  // float16 overflows past 65504; bfloat16 keeps float32's range (70000 -> 70144).
  EXPECT_EQ(F32({70000}).to(kFloat16).item<double>(), kInf);
  EXPECT_EQ(F32({70000}).to(kBFloat16).item<double>(), 70144.0);
  // Ties round to even: 2049 is halfway between float16's 2048 and 2050.
  EXPECT_EQ(F32({2049}).to(kFloat16).item<double>(), 2048.0);
  EXPECT_EQ(F32({2051}).to(kFloat16).item<double>(), 2052.0);
  // NaN stays NaN.
  EXPECT_TRUE(std::isnan(F32({static_cast<float>(kNaN)}).to(kFloat16).item<double>()));
  EXPECT_TRUE(std::isnan(F32({static_cast<float>(kNaN)}).to(kBFloat16).item<double>()));
  // Arithmetic in half precision rounds its result to half.
  Tensor h = F32({2048}).to(kFloat16);
  EXPECT_EQ((h + 1).item<double>(), 2048.0);
  EXPECT_EQ((h + 2).item<double>(), 2050.0);
  EXPECT_EQ(h.element_size(), 2);
}

TEST(Conversion, CopyWithBroadcastAndCast) {
  Tensor dst = zeros({2, 3});
  dst.copy_(F32({1, 2, 3}));
  EXPECT_EQ(Vals(dst), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  dst.copy_(I64({7, 8}, IntArray{2, 1}));
  EXPECT_EQ(Vals(dst), (std::vector<double>{7, 7, 7, 8, 8, 8}));
  dst.copy_(scalar_tensor(0.25, kFloat64));
  EXPECT_EQ(Vals(dst), std::vector<double>(6, 0.25));
  // Into a transposed view: the base receives the transpose.
  Tensor base = zeros({2, 3});
  base.t().copy_(Iota({3, 2}));
  EXPECT_EQ(Vals(base), (std::vector<double>{0, 2, 4, 1, 3, 5}));
  // From a non-contiguous source.
  Tensor d2 = zeros({3, 2});
  d2.copy_(Iota({2, 3}).t());
  EXPECT_EQ(Vals(d2), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  // Float into int truncates.
  Tensor di = zeros({2}, kInt64);
  di.copy_(F32({2.9f, -2.9f}));
  EXPECT_EQ(Longs(di), (std::vector<int64_t>{2, -2}));
  EXPECT_THROW(zeros({2, 3}).copy_(zeros({4})), Error);
  EXPECT_THROW(zeros({3}).copy_(zeros({2, 3})), Error);
}

// ====================================================================== printing / item / to_vector

TEST(Printing, PyTorchLikeRepr) {
  EXPECT_EQ(to_string(tensor({1.0, 2.0, 3.0})), "tensor([1., 2., 3.])");
  EXPECT_EQ(to_string(tensor({1.5, 2.25})), "tensor([1.5000, 2.2500])");
  EXPECT_EQ(to_string(tensor({-1.0, 2.0})), "tensor([-1.,  2.])");
  EXPECT_EQ(to_string(arange(3)), "tensor([0, 1, 2])");
  EXPECT_EQ(to_string(Bool({true, false})), "tensor([ True, False])");
  EXPECT_EQ(to_string(scalar_tensor(3.0)), "tensor(3.)");
  EXPECT_EQ(to_string(scalar_tensor(5, kInt64)), "tensor(5)");
  EXPECT_EQ(to_string(F32({1, 2, 3, 4}, IntArray{2, 2})), "tensor([[1., 2.],\n        [3., 4.]])");
  std::string d = to_string(F64({1, 2}));
  EXPECT_THAT(d, HasSubstr("tensor([1., 2.]"));
  EXPECT_THAT(d, HasSubstr("float64"));
  EXPECT_THAT(to_string(tensor({1.0, 2.0}).requires_grad_()), HasSubstr("requires_grad=True"));
  Tensor leaf = tensor({1.0, 2.0}).requires_grad_();
  EXPECT_THAT(to_string(leaf * 2), HasSubstr("grad_fn=<"));
  std::ostringstream os;
  os << tensor({0.5});
  EXPECT_EQ(os.str(), "tensor([0.5000])");
  EXPECT_EQ(to_string(F32({static_cast<float>(kNaN), static_cast<float>(kInf)})), "tensor([nan, inf])");
  // Printing a non-contiguous view prints its logical order.
  EXPECT_EQ(to_string(Iota({2, 2}).t()), "tensor([[0., 2.],\n        [1., 3.]])");
}

// Regression test (was an engine bug).
TEST(Printing, EmptyAndLargeTensorsLikePyTorch) {
  // torch.zeros(0) prints "tensor([])"; other empty shapes add ", size=(0, 3)".
  EXPECT_EQ(to_string(zeros({0})), "tensor([])");
  EXPECT_EQ(to_string(zeros({0, 3})), "tensor([], size=(0, 3))");
  // More than 1000 elements are summarised with the first and last three per dim.
  EXPECT_EQ(to_string(arange(2000)), "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  EXPECT_LT(to_string(zeros({100, 100})).size(), 1000u);
}

TEST(ElementAccess, ItemAndToVector) {
  EXPECT_EQ(scalar_tensor(2.5).item<double>(), 2.5);
  EXPECT_EQ(scalar_tensor(2.5).item<float>(), 2.5f);
  EXPECT_EQ(I64({42}).item<int64_t>(), 42);
  EXPECT_EQ(F32({7}, IntArray{1, 1}).item<int64_t>(), 7);
  EXPECT_EQ(Bool({true}).item<bool>(), true);
  EXPECT_EQ(F32({0.0}).item<bool>(), false);
  EXPECT_EQ(F32({3.75}).to(kFloat16).item<double>(), 3.75);
  EXPECT_EQ(tensor(std::vector<int32_t>{-9}).item<int32_t>(), -9);
  // to_vector walks the logical (row-major) order of a view and converts the dtype.
  EXPECT_EQ(Iota({2, 3}).t().to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(I64({1, 2}).to_vector<double>(), (std::vector<double>{1, 2}));
  EXPECT_EQ(F32({1.9f, -1.9f}).to_vector<int64_t>(), (std::vector<int64_t>{1, -1}));
  // data_ptr<T> reads the raw buffer.
  Tensor x = F32({1, 2, 3});
  EXPECT_EQ(x.data_ptr<float>()[2], 3.0f);
}

// ====================================================================== factories

TEST(Factories, ArangeLinspaceEyeFull) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), kInt64);
  EXPECT_EQ(Longs(a), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  Tensor af = arange(1, 2.5, 0.5);
  EXPECT_EQ(af.dtype(), kFloat32);
  EXPECT_EQ(Vals(af), (std::vector<double>{1, 1.5, 2}));
  EXPECT_EQ(Vals(arange(10, 0, -3, kInt64)), (std::vector<double>{10, 7, 4, 1}));
  EXPECT_EQ(arange(0.0, 1.0, 0.1).numel(), 10);
  EXPECT_EQ(arange(2.5).dtype(), kFloat32);
  EXPECT_EQ(arange(0).numel(), 0);
  Tensor l = linspace(0, 1, 5);
  EXPECT_EQ(l.dtype(), kFloat32);
  EXPECT_EQ(Vals(l), (std::vector<double>{0, 0.25, 0.5, 0.75, 1}));
  EXPECT_EQ(Vals(linspace(3, 3, 1)), (std::vector<double>{3}));
  EXPECT_EQ(linspace(0, 1, 0).numel(), 0);
  EXPECT_EQ(Vals(linspace(2, -2, 3)), (std::vector<double>{2, 0, -2}));
  Tensor e = eye(3);
  EXPECT_EQ(Vals(e), (std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(Vals(eye(2, 3)), (std::vector<double>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(eye(2, std::nullopt, kInt64).dtype(), kInt64);
  Tensor f = full({2, 2}, 7, kInt64);
  EXPECT_EQ(Longs(f), (std::vector<int64_t>{7, 7, 7, 7}));
  EXPECT_EQ(Vals(full({3}, -0.5)), (std::vector<double>{-0.5, -0.5, -0.5}));
  EXPECT_EQ(zeros({2, 3}).dtype(), kFloat32);
  EXPECT_EQ(Vals(zeros({2})), (std::vector<double>{0, 0}));
  EXPECT_EQ(Vals(ones({2}, kFloat64)), (std::vector<double>{1, 1}));
  EXPECT_EQ(ones({2}, kFloat64).dtype(), kFloat64);
  EXPECT_EQ(Vals(zeros_like(Iota({2}))), (std::vector<double>{0, 0}));
  EXPECT_EQ(ones_like(I64({1, 2})).dtype(), kInt64);
  EXPECT_EQ(Vals(full_like(Iota({2}), 3)), (std::vector<double>{3, 3}));
  EXPECT_EQ(empty({3, 0}).numel(), 0);
  EXPECT_EQ(scalar_tensor(4).dim(), 0);
  EXPECT_TRUE(zeros({2}, TensorOptions().with_requires_grad()).requires_grad());
  EXPECT_EQ(tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, IntArray{2, 3}).sizes(), (IntArray{2, 3}));
  EXPECT_EQ(tensor(std::vector<double>{1}).dtype(), kFloat64);
  EXPECT_EQ(tensor({1.0}).dtype(), kFloat32);
}

// torch.tensor / torch.full infer the dtype from the Python values; so do the C++ literals
// (float32 for integer literals was a porting trap).
TEST(Factories, LiteralsAndFillValuesKeepTheirKindAsInPyTorch) {
  EXPECT_EQ(tensor({1, 2, 3}).dtype(), kInt64);
  EXPECT_EQ(tensor({1, 2, 3}).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(tensor({1.0, 2.5}).dtype(), kFloat32);
  // A mixed list ({1, 2.5}) does not compile (ambiguous): write 1.0 as Python would make it float.
  EXPECT_EQ(tensor({true, false}).dtype(), kBool);
  EXPECT_EQ(tensor({1, 2}, kFloat64).dtype(), kFloat64);  // a given dtype wins
  EXPECT_EQ(full({2}, 3).dtype(), kInt64);
  EXPECT_EQ(full({2}, true).dtype(), kBool);
  EXPECT_EQ(full({2}, 3.5).dtype(), kFloat32);
  EXPECT_EQ(zeros({2}).dtype(), kFloat32);
  EXPECT_EQ(scalar_tensor(3).dtype(), kFloat32);  // torch.scalar_tensor(3) is float32
  EXPECT_EQ(linspace(2, 3, 1).item<float>(), 2.0f);
}

TEST(Factories, ArangeInfersIntegerDtypeFromIntegerBounds) {
  // torch.arange(0, 5) / torch::arange(0, 5) is int64: the dtype follows the arguments.
  EXPECT_EQ(arange(0, 5).dtype(), kInt64);
  EXPECT_EQ(arange(0, 5, 1).dtype(), kInt64);
  EXPECT_EQ(arange(0, 5, 0.5).dtype(), kFloat32);
}

TEST(Factories, LinspaceEndsExactlyAtEnd) {
  // torch.linspace's last value is `end` (computed from both ends).
  for (double end : {0.7, 0.3, 1.1, 2.9}) {
    Tensor l = linspace(0.1, end, 7, kFloat64);
    EXPECT_EQ(Vals(l).back(), end) << "end=" << end;
    EXPECT_EQ(Vals(l).front(), 0.1);
  }
}

TEST(Factories, FromBlobWrapsWithoutCopyAndCallsDeleter) {
  std::vector<float> buf = {1, 2, 3, 4, 5, 6};
  bool deleted = false;
  {
    Tensor t = from_blob(buf.data(), {2, 3}, kFloat32, [&](void*) { deleted = true; });
    EXPECT_EQ(t.data_ptr(), static_cast<void*>(buf.data()));
    EXPECT_EQ(Vals(t.t()), (std::vector<double>{1, 4, 2, 5, 3, 6}));
    t.mul_(2);
    EXPECT_EQ(buf[5], 12.0f);
    EXPECT_FALSE(deleted);
  }
  EXPECT_TRUE(deleted);
}

// ====================================================================== random

TEST(Random, ManualSeedReproducible) {
  manual_seed(42);
  Tensor a = rand({1000});
  Tensor an = randn({100});
  manual_seed(42);
  Tensor b = rand({1000});
  Tensor bn = randn({100});
  EXPECT_TRUE(equal(a, b));
  EXPECT_TRUE(equal(an, bn));
  // The stream moves on: the next draw differs.
  Tensor c = rand({1000});
  EXPECT_FALSE(equal(a, c));
  manual_seed(43);
  EXPECT_FALSE(equal(rand({1000}), a));
  // A draw of n then m elements equals neither of a single draw reused (no overlap).
  manual_seed(42);
  Tensor p1 = rand({10});
  Tensor p2 = rand({10});
  EXPECT_FALSE(equal(p1, p2));
}

TEST(Random, RandIsInHalfOpenUnitInterval) {
  manual_seed(1);
  for (ScalarType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    Tensor r = rand({100000}, dt);
    EXPECT_EQ(r.dtype(), dt);
    EXPECT_GE(r.min().item<double>(), 0.0) << dtype_name(dt);
    EXPECT_LT(r.max().item<double>(), 1.0) << dtype_name(dt);
    EXPECT_NEAR(r.to(kFloat64).mean().item<double>(), 0.5, 0.01) << dtype_name(dt);
  }
  // uniform_ with bounds.
  Tensor u = empty({10000}, kFloat64);
  u.uniform_(-2, 3);
  EXPECT_GE(u.min().item<double>(), -2.0);
  EXPECT_LT(u.max().item<double>(), 3.0);
  EXPECT_NEAR(u.mean().item<double>(), 0.5, 0.05);
}

TEST(Random, RandnMoments) {
  manual_seed(2);
  Tensor r = randn({100000});
  // Standard error of the mean is 1/sqrt(1e5) ~ 0.0032; of the std ~ 0.0022.
  EXPECT_NEAR(r.mean().item<double>(), 0.0, 0.02);
  EXPECT_NEAR(r.std().item<double>(), 1.0, 0.02);
  // About 68.3% within one sigma.
  double within = (abs(r) < 1.0).to(kFloat64).mean().item<double>();
  EXPECT_NEAR(within, 0.6827, 0.01);
  Tensor n = empty({100000}, kFloat64);
  n.normal_(3, 0.5);
  EXPECT_NEAR(n.mean().item<double>(), 3.0, 0.01);
  EXPECT_NEAR(n.std().item<double>(), 0.5, 0.01);
}

TEST(Random, RandintBounds) {
  manual_seed(3);
  Tensor r = randint(3, 7, {10000});
  EXPECT_EQ(r.dtype(), kInt64);
  EXPECT_EQ(r.min().item<int64_t>(), 3);
  EXPECT_EQ(r.max().item<int64_t>(), 6);
  for (int v = 3; v < 7; ++v) {
    double frac = (r == v).to(kFloat64).mean().item<double>();
    EXPECT_NEAR(frac, 0.25, 0.03) << v;
  }
  Tensor neg = randint(-5, -4, {100});
  EXPECT_EQ(neg.min().item<int64_t>(), -5);
  EXPECT_EQ(neg.max().item<int64_t>(), -5);
  EXPECT_EQ(randint(0, 10, {2, 3}, kInt32).dtype(), kInt32);
}

TEST(Random, RandpermIsAPermutation) {
  manual_seed(4);
  Tensor p = randperm(1000);
  EXPECT_EQ(p.dtype(), kInt64);
  Tensor sorted = std::get<0>(sort(p));
  EXPECT_TRUE(equal(sorted, arange(1000)));
  EXPECT_FALSE(equal(p, arange(1000)));
  EXPECT_EQ(randperm(0).numel(), 0);
  EXPECT_EQ(Longs(randperm(1)), (std::vector<int64_t>{0}));
  // Roughly uniform first element over many permutations of 4.
  std::vector<int> count(4, 0);
  for (int k = 0; k < 400; ++k) count[Longs(randperm(4))[0]]++;
  for (int c : count) EXPECT_NEAR(c, 100, 40);
}

TEST(Random, BernoulliMean) {
  manual_seed(5);
  Tensor p = full({100000}, 0.3);
  Tensor b = bernoulli(p);
  EXPECT_EQ(b.dtype(), kFloat32);
  std::vector<double> bv = Vals(b);
  for (size_t i = 0; i < bv.size(); i += 997) EXPECT_TRUE(bv[i] == 0 || bv[i] == 1);
  EXPECT_NEAR(b.mean().item<double>(), 0.3, 0.01);
  // Per-element probabilities: 0 and 1 are certain.
  Tensor pe = F32({0, 1, 0, 1});
  EXPECT_EQ(Vals(bernoulli(pe)), (std::vector<double>{0, 1, 0, 1}));
  Tensor z = empty({50000});
  z.bernoulli_(0.8);
  EXPECT_NEAR(z.mean().item<double>(), 0.8, 0.01);
}

TEST(Random, ResultsIndependentOfThreadCount) {
  ThreadsGuard restore;
  std::vector<Tensor> draws[3];
  std::vector<double> rowsums[3];
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    manual_seed(99);
    auto& d = draws[threads - 1];
    d.push_back(rand({1 << 20}));
    d.push_back(randn({300001}, kFloat64));
    d.push_back(rand({1000003}, kFloat64));
    d.push_back(bernoulli(full({200001}, 0.5)));
    d.push_back(randint(0, 1000, {100003}));
    Tensor n = empty({100001}, kFloat64);
    n.normal_(1, 2);
    d.push_back(n);
    // Row sums: one row per output, each summed by one thread.
    rowsums[threads - 1] = Vals(d[2].narrow(0, 0, 1000000).view({1000, 1000}).sum({1}));
  }
  for (int t = 1; t < 3; ++t) {
    for (size_t k = 0; k < draws[0].size(); ++k) {
      EXPECT_TRUE(equal(draws[0][k], draws[t][k])) << "draw " << k << " differs with " << t + 1 << " threads";
    }
    EXPECT_EQ(rowsums[0], rowsums[t]);
  }
}

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
