// The bfloat16 GEMM (core/backend/cpu/bf16_gemm.h) against float64 products of the same
// bfloat16 values, on every layout and edge the packing has a branch for; the float-to-bf16
// rounding against the scalar BFloat16 conversion; and the bfloat16 mm / linear / convolution ops, on
// whichever path this level takes (ctest reruns the Matmul tests at lower ISA levels, where
// the products are widened to float32 instead); col2im on 16-bit floats summing in float32.
#include "core/backend/cpu/bf16_gemm.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/anvil.h"
#include "core/backend/cpu/bf16_gemm_amx.h"
#include "core/backend/cpu/isa.h"
#include "core/util/cpu_features.h"
#include "core/util/half.h"
#include "tests/core/guarded_buffer.h"

namespace anvil {
namespace {

std::vector<uint16_t> RandomBf16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = BFloat16(u(rng)).bits;
  return v;
}
double F(uint16_t bits) { return detail::BitsFloat(uint32_t{bits} << 16); }

struct Layout {
  bool ta, tb;
};

// C (m x n, rows ldc apart) against float64's beta * 0.5 + A B (C started as 0.5 where beta is
// 1), within float32 summation (bf16 x bf16 is exact in float32); the columns past n must
// still hold `gap`.
::testing::AssertionResult MatchesFloat64(const std::vector<float>& c, int64_t ldc, float gap, int64_t m, int64_t n,
                                          int64_t k, const std::vector<uint16_t>& a, int64_t a_rs, int64_t a_cs,
                                          const std::vector<uint16_t>& b, int64_t b_rs, int64_t b_cs, float beta) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = c[static_cast<size_t>(i * ldc + j)];
      if (j >= n) {
        if (got != gap) return ::testing::AssertionFailure() << "written past column n at " << i << "," << j;
        continue;
      }
      double ref = beta * 0.5, mag = std::fabs(ref);
      for (int64_t p = 0; p < k; ++p) {
        const double t =
            F(a[static_cast<size_t>(i * a_rs + p * a_cs)]) * F(b[static_cast<size_t>(p * b_rs + j * b_cs)]);
        ref += t;
        mag += std::fabs(t);
      }
      if (!(std::fabs(got - ref) <= 1e-6 * mag + 1e-30)) {
        return ::testing::AssertionFailure() << "at " << i << "," << j << ": " << got << " vs float64 " << ref;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(Bf16Gemm, MatchesFloat64OnEveryLayoutAndEdge) {
  if (!cpu::bf16_gemm_available()) {
    GTEST_SKIP() << "no AVX-512-BF16 at the active level (" << cpu_features().flags() << "; level "
                 << isa_name(cpu::active_isa()) << ")";
  }
  const int64_t ms[] = {1, 5, 12, 13, 37};
  const int64_t ns[] = {1, 17, 32, 33, 70};
  const int64_t ks[] = {1, 2, 3, 511, 512, 513, 1100};
  const Layout layouts[] = {{false, false}, {false, true}, {true, false}, {true, true}};
  uint32_t seed = 1;
  // Every small combination, then products past one block in each direction: more than a row
  // block (96 rows), a group of B panels (8 x 32 columns) and a k chunk (1024), each with a
  // partial remainder.
  std::vector<std::array<int64_t, 3>> shapes;
  for (int64_t m : ms) {
    for (int64_t n : ns) {
      for (int64_t k : ks) shapes.push_back({m, n, k});
    }
  }
  shapes.push_back({97, 257, 1025});
  shapes.push_back({200, 40, 2049});
  for (const auto& [m, n, k] : shapes) {
    for (const Layout& l : layouts) {
      for (float beta : {0.0f, 1.0f}) {
        const auto a = RandomBf16(static_cast<size_t>(m * k), seed++);
        const auto b = RandomBf16(static_cast<size_t>(k * n), seed++);
        const int64_t a_rs = l.ta ? 1 : k, a_cs = l.ta ? m : 1;
        const int64_t b_rs = l.tb ? 1 : n, b_cs = l.tb ? k : 1;
        const int64_t ldc = n + 3;  // C rows with a gap: nothing past column n is written
        std::vector<float> c(static_cast<size_t>(m * ldc), 0.5f);
        cpu::bf16_gemm(m, n, k, a.data(), a_rs, a_cs, b.data(), b_rs, b_cs, beta, c.data(), ldc);
        ASSERT_TRUE(MatchesFloat64(c, ldc, 0.5f, m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, beta))
            << "m " << m << " n " << n << " k " << k << " ta " << l.ta << " tb " << l.tb << " beta " << beta;
      }
    }
  }
}

// The AMX kernel (bf16_gemm_amx.h) on every layout and edge its packing and tiling have a
// branch for: partial tiles in rows, columns and k, a second k chunk, a column-major or strided
// A, a transposed B, beta 0 (C never read: it starts as NaN) and 1. On emulated tiles on any
// CPU with AVX-512-BF16; on the AMX instructions too where the CPU has them.
TEST(Bf16Gemm, AmxKernelMatchesFloat64OnEveryLayoutAndEdge) {
  if (!cpu_features().avx512_bf16) GTEST_SKIP() << "the B packing needs AVX-512 (" << cpu_features().flags() << ")";
  using Gemm = void (*)(int64_t, int64_t, int64_t, const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, int64_t,
                        float, float*, int64_t);
  std::vector<std::pair<const char*, Gemm>> kernels{{"emulated tiles", &cpu::amx_bf16_gemm_emulated}};
  if (cpu::amx_bf16_gemm_available()) {
    kernels.emplace_back("AMX", &cpu::amx_bf16_gemm);
  } else {
    std::printf("AMX kernel not run on the hardware here: %s\n", cpu::amx_bf16_gemm_unavailable_reason().c_str());
  }
  struct Layout {
    const char* name;
    bool ta, tb;
    int64_t a_step;  // A's columns this far apart (2: a strided view)
  };
  const Layout layouts[] = {{"A, B", false, false, 1},
                            {"A, B^T", false, true, 1},
                            {"A^T, B", true, false, 1},
                            {"A strided, B^T", false, true, 2}};
  const int64_t ms[] = {1, 16, 17, 33, 130};
  const int64_t ns[] = {1, 16, 17, 33, 70};
  const int64_t ks[] = {1, 31, 33, 513, 600};
  uint32_t seed = 100;
  for (const auto& [kernel_name, gemm] : kernels) {
    for (const Layout& l : layouts) {
      for (int64_t m : ms) {
        for (int64_t n : ns) {
          for (int64_t k : ks) {
            const float beta = (m + n + k) % 2 == 0 ? 1.0f : 0.0f;
            const auto a = RandomBf16(static_cast<size_t>(m * k * l.a_step), seed++);
            const auto b = RandomBf16(static_cast<size_t>(k * n), seed++);
            const int64_t a_rs = l.ta ? 1 : k * l.a_step, a_cs = l.ta ? m : l.a_step;
            const int64_t b_rs = l.tb ? 1 : n, b_cs = l.tb ? k : 1;
            const int64_t ldc = n + 3;  // a gap after each row: nothing past column n is written
            const float start = beta != 0.0f ? 0.5f : std::numeric_limits<float>::quiet_NaN();
            std::vector<float> c(static_cast<size_t>(m * ldc), start);
            for (int64_t i = 0; i < m; ++i) std::fill(c.begin() + i * ldc + n, c.begin() + (i + 1) * ldc, -7.0f);
            gemm(m, n, k, a.data(), a_rs, a_cs, b.data(), b_rs, b_cs, beta, c.data(), ldc);
            ASSERT_TRUE(MatchesFloat64(c, ldc, -7.0f, m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, beta))
                << kernel_name << ", " << l.name << ": m " << m << " n " << n << " k " << k << " beta " << beta;
          }
        }
      }
    }
  }
}

// A k that is not a whole number of tile steps is padded with zeros in both packed operands:
// a padding that kept what an earlier product left in the per-thread buffers would multiply a
// stale infinity by a zero (NaN) or a stale value by a stale value.
TEST(Bf16Gemm, AmxKernelPadsTilesWithZerosNotStaleValues) {
  if (!cpu_features().avx512_bf16) GTEST_SKIP() << "the B packing needs AVX-512 (" << cpu_features().flags() << ")";
  const int64_t m = 40, n = 40;
  const std::vector<uint16_t> inf(static_cast<size_t>(m * 64), BFloat16(std::numeric_limits<float>::infinity()).bits);
  std::vector<float> c(static_cast<size_t>(m * n));
  cpu::amx_bf16_gemm_emulated(m, n, 64, inf.data(), 64, 1, inf.data(), n, 1, 0.0f, c.data(), n);
  ASSERT_TRUE(std::isinf(c[0]));
  const int64_t k = 33;  // 17 pairs: 15 pairs of padding in the tile step
  const auto a = RandomBf16(static_cast<size_t>(m * k), 7), b = RandomBf16(static_cast<size_t>(k * n), 8);
  cpu::amx_bf16_gemm_emulated(m, n, k, a.data(), k, 1, b.data(), n, 1, 0.0f, c.data(), n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        ref += F(a[i * k + p]) * F(b[p * n + j]);
        mag += std::fabs(F(a[i * k + p]) * F(b[p * n + j]));
      }
      ASSERT_NEAR(c[i * n + j], ref, 1e-6 * mag) << "at " << i << "," << j;
    }
  }
}

// Both bfloat16 kernels read only their operands: A, B and C each end (then start) exactly at
// an inaccessible page, on every layout, with odd k (the last pair is half outside A's row or
// B's column) and partial tiles and panels.
TEST(Bf16Gemm, KernelsReadOnlyTheirOperands) {
  if (!cpu_features().avx512_bf16) GTEST_SKIP() << "the kernels need AVX-512-BF16 (" << cpu_features().flags() << ")";
  using Gemm = void (*)(int64_t, int64_t, int64_t, const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, int64_t,
                        float, float*, int64_t);
  std::vector<std::pair<const char*, Gemm>> kernels{{"AMX emulated tiles", &cpu::amx_bf16_gemm_emulated}};
  if (cpu::bf16_gemm_available()) kernels.emplace_back("bf16_gemm", &cpu::bf16_gemm);
  if (cpu::amx_bf16_gemm_available()) kernels.emplace_back("AMX", &cpu::amx_bf16_gemm);
  const Layout layouts[] = {{false, false}, {false, true}, {true, false}, {true, true}};
  const int64_t shapes[][3] = {{1, 1, 1}, {1, 33, 7}, {13, 1, 9}, {17, 40, 33}, {37, 70, 513}, {16, 32, 64}};
  uint32_t seed = 500;
  for (const auto& [name, gemm] : kernels) {
    for (const Layout& l : layouts) {
      for (const auto& [m, n, k] : shapes) {
        for (bool guard_after : {true, false}) {
          const auto a = RandomBf16(static_cast<size_t>(m * k), seed++);
          const auto b = RandomBf16(static_cast<size_t>(k * n), seed++);
          const int64_t a_rs = l.ta ? 1 : k, a_cs = l.ta ? m : 1;
          const int64_t b_rs = l.tb ? 1 : n, b_cs = l.tb ? k : 1;
          test::GuardedBuffer<uint16_t> ga(a, guard_after), gb(b, guard_after);
          test::GuardedBuffer<float> gc(std::vector<float>(static_cast<size_t>(m * n), 0.5f), guard_after);
          gemm(m, n, k, ga.data(), a_rs, a_cs, gb.data(), b_rs, b_cs, 1.0f, gc.data(), n);
          ASSERT_TRUE(MatchesFloat64(gc.to_vector(), n, 0.0f, m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, 1.0f))
              << name << ": m " << m << " n " << n << " k " << k << " ta " << l.ta << " tb " << l.tb
              << (guard_after ? ", guard after" : ", guard before");
        }
      }
    }
  }
}

// Which bfloat16 kernel runs is named (start line, /metrics, GetServerInfo, bench tables) and
// follows the ISA level.
TEST(Bf16Gemm, TheKernelInUseIsNamedAndFollowsTheIsaLevel) {
  const std::string name = cpu::bf16_gemm_kernel_name();
  if (!cpu::bf16_gemm_available()) {
    EXPECT_EQ(name, "none (widened to float32)");
  } else if (cpu::amx_bf16_gemm_available()) {
    EXPECT_EQ(name, "anvil-amx-bf16 (tdpbf16ps)");
    EXPECT_EQ(cpu::amx_bf16_gemm_unavailable_reason(), "");
  } else {
    EXPECT_EQ(name, "anvil-avx512-bf16 (vdpbf16ps)");
    EXPECT_NE(cpu::amx_bf16_gemm_unavailable_reason(), "");  // says why not AMX
  }
  if (cpu::active_isa() >= CpuIsa::kAvx512) {
    cpu::ScopedIsa lower(CpuIsa::kAvx2);
    EXPECT_FALSE(cpu::amx_bf16_gemm_available());
    EXPECT_EQ(std::string(cpu::bf16_gemm_kernel_name()), "none (widened to float32)");
    EXPECT_NE(cpu::amx_bf16_gemm_unavailable_reason(), "");
  }
}

TEST(Bf16Gemm, FloatToBf16RoundsLikeTheScalarConversion) {
  std::vector<float> in = {0.0f,
                           -0.0f,
                           1.0f,
                           1.00390625f,  // a tie: rounds to even (1.0)
                           1.01171875f,  // a tie: rounds to even (1.015625)
                           3.4e38f,      // rounds past the largest bf16: inf
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::denorm_min(),  // kept, not flushed
                           1e-40f,
                           -1e-39f};
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 1000; ++i) {
    const uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    in.push_back(f);
  }
  std::vector<uint16_t> out(in.size());
  cpu::float_to_bf16(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t want = BFloat16(in[i]).bits;
    if (std::isnan(in[i])) {
      EXPECT_TRUE(std::isnan(F(out[i]))) << i;
    } else {
      EXPECT_EQ(out[i], want) << "value " << in[i] << " (index " << i << ")";
    }
  }
}

// mm, bmm, linear and linear_relu of bfloat16 tensors: float32 accumulation and one rounding
// per output, so each result is the float64 product rounded to bfloat16, give or take one
// bfloat16 step (float32 summation can cross a rounding boundary).
TEST(Matmul, Bfloat16ProductsAreFloat64RoundedOnce) {
  manual_seed(11);
  const Tensor x = randn({37, 300}).to(kBFloat16);
  const Tensor w = randn({70, 300}).to(kBFloat16);
  const Tensor bias = randn({70}).to(kBFloat16);
  const Tensor x64 = x.to(kFloat64), w64 = w.to(kFloat64), b64 = bias.to(kFloat64);
  // `mag`: the same product of absolute values, for the float32 summation's share.
  auto expect_rounded = [](const Tensor& got, const Tensor& ref64, const Tensor& mag64, const char* what) {
    ASSERT_EQ(got.dtype(), kBFloat16) << what;
    ASSERT_EQ(got.sizes(), ref64.sizes()) << what;
    const auto g = got.to(kFloat64).contiguous().to_vector<double>();
    const auto r = ref64.contiguous().to_vector<double>();
    const auto mag = mag64.contiguous().to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) {
      const double step = std::ldexp(1.0, std::ilogb(std::max(std::fabs(r[i]), 1e-30)) - 7);
      ASSERT_LE(std::fabs(g[i] - r[i]), step + 1e-6 * mag[i]) << what << " at " << i << ": " << g[i] << " vs " << r[i];
    }
  };
  const Tensor xa = x64.abs(), wa = w64.abs();
  expect_rounded(mm(x, w.t()), mm(x64, w64.t()), mm(xa, wa.t()), "mm x W^T");
  expect_rounded(mm(x.t().contiguous().t(), w.t()), mm(x64, w64.t()), mm(xa, wa.t()), "mm with a column-major A");
  expect_rounded(mm(w, x.t()), mm(w64, x64.t()), mm(wa, xa.t()), "mm W x^T");
  expect_rounded(linear(x, w, bias), linear(x64, w64, b64), linear(xa, wa, b64.abs()), "linear");
  expect_rounded(linear_relu(x, w, bias), relu(linear(x64, w64, b64)), linear(xa, wa, b64.abs()), "linear_relu");
  const Tensor xb = randn({3, 9, 40}).to(kBFloat16), yb = randn({3, 40, 21}).to(kBFloat16);
  const Tensor xb64 = xb.to(kFloat64), yb64 = yb.to(kFloat64);
  expect_rounded(bmm(xb, yb), bmm(xb64, yb64), bmm(xb64.abs(), yb64.abs()), "bmm");
}

// Convolutions on bfloat16 (autocast's conv2d and its two gradient rows): on the bfloat16 GEMM
// at this level, widened to float32 below it; either way float64's result rounded once, up to
// float32 summation. Groups, strides, dilation, padding, the 1x1 form that needs no columns and
// a single image (whose GEMM splits its columns over the pool).
TEST(Matmul, Bfloat16ConvolutionsAreFloat64RoundedOnce) {
  struct Case {
    const char* name;
    IntArray x, w;
    WindowParams p;
    int64_t groups;
    bool bias;
  };
  // All but the last are above conv_bf16.cc's kMinImageProduct (they take the bfloat16 GEMM
  // where the CPU has one); the last is small and is widened everywhere.
  const std::vector<Case> cases{
      {"3x3 groups 2 padding 1", {2, 64, 16, 16}, {128, 32, 3, 3}, {{3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}}, 2, true},
      {"3x3 stride 2 dilation 2", {2, 32, 36, 35}, {64, 32, 3, 3}, {{3, 3}, {2, 2}, {1, 1, 1, 1}, {2, 2}}, 1, false},
      {"1x1 direct", {2, 256, 24, 24}, {64, 256, 1, 1}, {{1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}}, 1, true},
      {"one image", {1, 32, 32, 32}, {64, 32, 3, 3}, {{3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}}, 1, true},
      {"small, widened", {3, 4, 10, 9}, {6, 4, 3, 2}, {{3, 2}, {2, 2}, {1, 1, 1, 1}, {2, 2}}, 1, true},
  };
  manual_seed(12);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Tensor x = randn(c.x).to(kBFloat16), w = randn(c.w).to(kBFloat16);
    const Tensor b = c.bias ? randn({c.w[0]}).to(kBFloat16) : Tensor();
    // The output, the input gradient and the weight gradient for a gradient `gy` of the output.
    auto run = [&](const Tensor& xv, const Tensor& wv, const Tensor& bv, const Tensor* gy) {
      const Tensor xl = xv.detach().requires_grad_(), wl = wv.detach().requires_grad_();
      const Tensor y = convolution(xl, wl, bv, c.p, c.groups);
      const Tensor g = gy != nullptr ? *gy : randn(y.sizes()).to(y.dtype());
      y.backward(g);
      return std::vector<Tensor>{y.detach(), xl.grad(), wl.grad(), g};
    };
    const std::vector<Tensor> got = run(x, w, b, nullptr);
    const Tensor gy64 = got[3].to(kFloat64), b64 = c.bias ? b.to(kFloat64) : Tensor();
    const std::vector<Tensor> ref = run(x.to(kFloat64), w.to(kFloat64), b64, &gy64);
    const Tensor gya = gy64.abs();
    const std::vector<Tensor> mag =
        run(x.to(kFloat64).abs(), w.to(kFloat64).abs(), c.bias ? b64.abs() : Tensor(), &gya);
    const char* what[] = {"output", "input gradient", "weight gradient"};
    for (size_t k = 0; k < 3; ++k) {
      ASSERT_EQ(got[k].dtype(), kBFloat16) << what[k];
      ASSERT_EQ(got[k].sizes(), ref[k].sizes()) << what[k];
      const auto g = got[k].to(kFloat64).contiguous().to_vector<double>();
      const auto r = ref[k].contiguous().to_vector<double>();
      const auto m = mag[k].contiguous().to_vector<double>();
      for (size_t i = 0; i < g.size(); ++i) {
        // Half a bfloat16 step of the rounding, and float32 summation over the products.
        const double step = std::ldexp(1.0, std::ilogb(std::max(std::fabs(r[i]), 1e-30)) - 8);
        ASSERT_LE(std::fabs(g[i] - r[i]), step + 1e-5 * m[i])
            << what[k] << " at " << i << ": " << g[i] << " vs " << r[i];
      }
    }
  }
}

// col2im on 16-bit floats (a pooling's or an unfused convolution's gradient): the windows'
// overlapping contributions are summed in float32 and rounded once. Values on a grid of 1/64
// below 2 in magnitude make every float32 sum exact, so the result must equal float64's
// rounded once, bit for bit; rounding after every add (as before) does not.
TEST(Bf16Kernels, Col2ImSumsOverlappingWindowsInFloat32AndRoundsOnce) {
  manual_seed(13);
  WindowParams p;
  p.kernel = {3, 3};
  p.padding = {1, 1, 1, 1};
  for (ScalarType dt : {kBFloat16, kFloat16}) {
    const Tensor cols = (randint(-127, 128, {2, 3 * 9, 6 * 7}).to(kFloat32) / 64.0).to(dt);
    const Tensor got = col2im(cols, {6, 7}, p);
    const Tensor want = col2im(cols.to(kFloat64), {6, 7}, p).to(dt);
    ASSERT_EQ(got.dtype(), dt);
    EXPECT_TRUE(equal(got, want)) << dt << ": max |diff| "
                                  << (got.to(kFloat64) - want.to(kFloat64)).abs().max().item<double>();
  }
}

}  // namespace
}  // namespace anvil
