// Forward values of the matrix products (core/ops/linalg.cc),
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
    EXPECT_THAT(ErrorOf([&] {
                  mm_pair(big, randn({700, 96}), big, randn({699, 96}));
                }),
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
  const Tensor ref_dx = (up64.unsqueeze(2) * w64.unsqueeze(0)).sum({1});  // up w
  const Tensor ref_dw = (up64.unsqueeze(2) * x64.unsqueeze(1)).sum({0});  // up^T x
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
      const Tensor w =
          (k.weight_transposed ? randn({in, k.out}, dt).t() : randn({k.out, in}, dt)).detach().requires_grad_();
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
