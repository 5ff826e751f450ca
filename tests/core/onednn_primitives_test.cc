// oneDNN's bf16 and int8 primitives (core/backend/cpu/onednn_primitives.h): the bf16 matmul
// against float64 products of the same bfloat16 values and against Anvil's bf16 kernel, on odd
// shapes and every transposed layout; the int8 matmul bit for bit against the scalar reference
// (int64 sums are not needed: the reference is the definition, int8_gemm.h); the bf16
// convolution against a float64 convolution of the same values, rounded once; the primitive
// cache (a repeated shape builds nothing; the capacity holds; concurrent calls agree). Each test
// skips, saying why, where libdnnl.so.2 (or the CPU feature a primitive needs) is absent.
#include "core/backend/cpu/onednn_primitives.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/anvil.h"
#include "core/backend/cpu/bf16_gemm.h"
#include "core/backend/cpu/int8_gemm.h"
#include "core/backend/cpu/isa.h"
#include "core/util/error.h"
#include "core/util/half.h"

namespace anvil {
namespace {

namespace dnn = cpu::onednn;

#define SKIP_WITHOUT(check)                                  \
  do {                                                       \
    std::string why_;                                        \
    if (!(check(&why_))) GTEST_SKIP() << "oneDNN: " << why_; \
  } while (0)

std::vector<uint16_t> RandomBf16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = BFloat16(u(rng)).bits;
  return v;
}
double F(uint16_t bits) { return detail::BitsFloat(uint32_t{bits} << 16); }

template <typename T>
std::vector<T> RandomInts(size_t n, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(u(rng));
  return v;
}

// A(i, p) and B(p, j) of an m x k and a k x n operand stored row-major, or transposed.
struct Operands {
  int64_t a_rs, a_cs, b_rs, b_cs;
};
Operands Strides(bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  return {ta ? 1 : k, ta ? m : 1, tb ? 1 : n, tb ? k : 1};
}

TEST(OneDnnPrimitives, Bf16MatmulMatchesFloat64AndAnvilsKernel) {
  SKIP_WITHOUT(dnn::bf16_available);
  uint32_t seed = 1;
  for (int64_t m : {1, 7, 33, 128}) {
    for (int64_t n : {1, 17, 64, 100}) {
      for (int64_t k : {1, 3, 64, 257}) {
        for (int layout = 0; layout < 4; ++layout) {
          for (float beta : {0.0f, 1.0f}) {
            const Operands s = Strides(layout & 1, layout & 2, m, n, k);
            const std::vector<uint16_t> a = RandomBf16(static_cast<size_t>(m * k), seed++);
            const std::vector<uint16_t> b = RandomBf16(static_cast<size_t>(k * n), seed++);
            const int64_t ldc = n + 3;  // C's rows apart, the gap never written
            std::vector<float> c(static_cast<size_t>(m * ldc), 0.5f), anvil(c);
            dnn::bf16_matmul(m, n, k, a.data(), s.a_rs, s.a_cs, b.data(), s.b_rs, s.b_cs, beta, c.data(), ldc);
            cpu::bf16_gemm_with(cpu::Bf16GemmCandidate::kAnvil, m, n, k, a.data(), s.a_rs, s.a_cs, b.data(), s.b_rs,
                                s.b_cs, beta, anvil.data(), ldc);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < ldc; ++j) {
                const float got = c[static_cast<size_t>(i * ldc + j)];
                if (j >= n) {
                  ASSERT_EQ(got, 0.5f) << "written past column n at " << i << "," << j;
                  continue;
                }
                double ref = beta * 0.5, mag = std::fabs(ref);
                for (int64_t p = 0; p < k; ++p) {
                  const double t = F(a[static_cast<size_t>(i * s.a_rs + p * s.a_cs)]) *
                                   F(b[static_cast<size_t>(p * s.b_rs + j * s.b_cs)]);
                  ref += t;
                  mag += std::fabs(t);
                }
                // bf16 x bf16 is exact in float32: only the float32 sums' rounding differs.
                ASSERT_NEAR(got, ref, 1e-5 * mag + 1e-30)
                    << m << "x" << n << "x" << k << " layout " << layout << " beta " << beta << " at " << i << "," << j;
                ASSERT_NEAR(got, anvil[static_cast<size_t>(i * ldc + j)], 2e-5 * mag + 1e-30)
                    << "oneDNN against Anvil's kernel, " << m << "x" << n << "x" << k << " layout " << layout;
              }
            }
          }
        }
      }
    }
  }
}

// The bfloat16-destination product: the float64 sum, plus the bias, through relu, rounded once
// to bfloat16; on one thread and split over two by oneDNN, with C's row gap never written.
TEST(OneDnnPrimitives, RoundedBf16MatmulIsTheFloat64ResultWithBiasAndReluRoundedOnce) {
  SKIP_WITHOUT(dnn::bf16_available);
  uint32_t seed = 100;
  constexpr uint16_t kUntouched = 0x7fc1;  // a NaN pattern no result has
  for (int64_t m : {1, 7, 130}) {
    for (int64_t n : {1, 17, 100}) {
      for (int64_t k : {1, 64, 257}) {
        for (int layout = 0; layout < 4; ++layout) {
          for (int variant = 0; variant < 8; ++variant) {
            const bool with_bias = variant & 1, relu = variant & 2;
            const int threads = variant & 4 ? 2 : 1;
            const Operands s = Strides(layout & 1, layout & 2, m, n, k);
            const std::vector<uint16_t> a = RandomBf16(static_cast<size_t>(m * k), seed++);
            const std::vector<uint16_t> b = RandomBf16(static_cast<size_t>(k * n), seed++);
            std::vector<float> bias(static_cast<size_t>(n));
            for (int64_t j = 0; j < n; ++j) bias[static_cast<size_t>(j)] = 0.25f * static_cast<float>(j % 9) - 1.0f;
            const int64_t ldc = n + 3;
            std::vector<uint16_t> c(static_cast<size_t>(m * ldc), kUntouched);
            dnn::bf16_matmul_rounded(m, n, k, a.data(), s.a_rs, s.a_cs, b.data(), s.b_rs, s.b_cs,
                                     with_bias ? bias.data() : nullptr, relu, c.data(), ldc, threads);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < ldc; ++j) {
                const uint16_t got = c[static_cast<size_t>(i * ldc + j)];
                if (j >= n) {
                  ASSERT_EQ(got, kUntouched) << "written past column n at " << i << "," << j;
                  continue;
                }
                double ref = with_bias ? bias[static_cast<size_t>(j)] : 0.0, mag = std::fabs(ref);
                for (int64_t p = 0; p < k; ++p) {
                  const double t = F(a[static_cast<size_t>(i * s.a_rs + p * s.a_cs)]) *
                                   F(b[static_cast<size_t>(p * s.b_rs + j * s.b_cs)]);
                  ref += t;
                  mag += std::fabs(t);
                }
                if (relu && ref < -1e-5 * mag) {
                  ASSERT_EQ(got, 0) << "relu of a negative sum is +0, " << m << "x" << n << "x" << k;
                  continue;
                }
                if (relu) ref = std::max(ref, 0.0);
                // One rounding to bfloat16 (half an ulp: 2^-9 relative) on the float32 sum.
                ASSERT_NEAR(F(got), ref, std::ldexp(std::fabs(ref), -8) + 1e-5 * mag + 1e-30)
                    << m << "x" << n << "x" << k << " layout " << layout << " bias " << with_bias << " relu " << relu
                    << " threads " << threads << " at " << i << "," << j;
              }
            }
          }
        }
      }
    }
  }
  // The implementation named, never a reference path.
  const std::string impl = dnn::bf16_matmul_rounded_impl(256, 256, 256, 256, 1, 256, 1, 256, true, true, 2);
  EXPECT_EQ(impl.find("ref"), std::string::npos) << impl;
}

TEST(OneDnnPrimitives, Bf16MatmulTakesOnlyUnitStrideOperands) {
  SKIP_WITHOUT(dnn::bf16_available);
  EXPECT_TRUE(dnn::bf16_matmul_supported(8, 1, 1, 8));
  EXPECT_FALSE(dnn::bf16_matmul_supported(16, 2, 8, 1));
  std::vector<uint16_t> a(64), b(64);
  std::vector<float> c(16);
  try {
    dnn::bf16_matmul(4, 4, 4, a.data(), 16, 2, b.data(), 4, 1, 0.0f, c.data(), 4);
    FAIL() << "expected an error for an operand with no unit stride";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row- or column-major"), std::string::npos) << e.what();
  }
  // bf16_gemm keeps such operands on Anvil's kernel whatever the choice.
  const std::vector<uint16_t> x = RandomBf16(64, 3), y = RandomBf16(64, 4);
  cpu::bf16_gemm(4, 4, 4, x.data(), 16, 2, y.data(), 4, 1, 0.0f, c.data(), 4);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      double ref = 0;
      for (int64_t p = 0; p < 4; ++p)
        ref += F(x[static_cast<size_t>(i * 16 + p * 2)]) * F(y[static_cast<size_t>(p * 4 + j)]);
      EXPECT_NEAR(c[static_cast<size_t>(i * 4 + j)], ref, 1e-5);
    }
  }
}

// The definition: Anvil's scalar reference kernel.
std::vector<int32_t> ReferenceInt8(int64_t m, int64_t n, int64_t k, const std::vector<uint8_t>& a, int64_t lda,
                                   const std::vector<int8_t>& w, int64_t ldw) {
  const cpu::PackedInt8Weight ref = cpu::pack_int8_weight(w.data(), n, k, ldw, cpu::Int8GemmKernel::kReference);
  std::vector<int32_t> c(static_cast<size_t>(m * n));
  cpu::int8_gemm(m, a.data(), lda, ref, c.data(), n);
  return c;
}

TEST(OneDnnPrimitives, Int8MatmulEqualsTheReferenceBitForBit) {
  SKIP_WITHOUT(dnn::int8_available);
  uint32_t seed = 7;
  for (int64_t m : {1, 5, 16, 33}) {
    for (int64_t n : {1, 15, 16, 70}) {
      for (int64_t k : {1, 3, 64, 129}) {
        for (int64_t pad : {0, 5}) {  // rows of A, W and C further apart than their lengths
          const int64_t lda = k + pad, ldw = k + 2 * pad, ldc = n + pad;
          const std::vector<uint8_t> a = RandomInts<uint8_t>(static_cast<size_t>(m * lda), 0, 255, seed++);
          const std::vector<int8_t> w = RandomInts<int8_t>(static_cast<size_t>(n * ldw), -128, 127, seed++);
          std::vector<int32_t> c(static_cast<size_t>(m * ldc), -7);
          dnn::int8_matmul(m, n, k, a.data(), lda, w.data(), ldw, c.data(), ldc);
          const std::vector<int32_t> want = ReferenceInt8(m, n, k, a, lda, w, ldw);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < ldc; ++j) {
              const int32_t got = c[static_cast<size_t>(i * ldc + j)];
              ASSERT_EQ(got, j < n ? want[static_cast<size_t>(i * n + j)] : -7)
                  << m << "x" << n << "x" << k << " pad " << pad << " at " << i << "," << j;
            }
          }
        }
      }
    }
  }
}

TEST(OneDnnPrimitives, Int8MatmulExtremeValuesDoNotSaturate) {
  SKIP_WITHOUT(dnn::int8_available);
  // 255 x -128 summed 4096 times: each pair of products overflows 16 bits (vpmaddubsw would
  // saturate); the exact sum fits int32.
  const int64_t m = 3, n = 17, k = 4096;
  std::vector<uint8_t> a(static_cast<size_t>(m * k), 255);
  std::vector<int8_t> w(static_cast<size_t>(n * k), -128);
  for (int64_t p = 0; p < k; p += 3) w[static_cast<size_t>(p)] = 127;  // row 0 mixed
  std::vector<int32_t> c(static_cast<size_t>(m * n));
  dnn::int8_matmul(m, n, k, a.data(), k, w.data(), k, c.data(), n);
  EXPECT_EQ(c, ReferenceInt8(m, n, k, a, k, w, k));
  EXPECT_EQ(c[1], 255 * -128 * k);
}

TEST(OneDnnPrimitives, Int8ProductsThroughTheLayersEntryPointTakeTheChosenCandidate) {
  SKIP_WITHOUT(dnn::int8_available);
  // int8_gemm_columns on a packed weight: whichever candidate the shape takes (ctest forces
  // each with ANVIL_INT8_GEMM), column blocks equal the reference.
  const int64_t m = 20, n = 48, k = 100;
  const std::vector<uint8_t> a = RandomInts<uint8_t>(static_cast<size_t>(m * k), 0, 255, 31);
  const std::vector<int8_t> w = RandomInts<int8_t>(static_cast<size_t>(n * k), -128, 127, 32);
  const cpu::PackedInt8Weight packed = cpu::pack_int8_weight(w.data(), n, k, k);
  std::vector<int32_t> c(static_cast<size_t>(m * n), 0);
  cpu::int8_gemm_columns(m, a.data(), k, packed, 0, 16, c.data(), n);
  cpu::int8_gemm_columns(m, a.data(), k, packed, 16, 48, c.data(), n);
  EXPECT_EQ(c, ReferenceInt8(m, n, k, a, k, w, k));
}

// A float64 convolution of bfloat16 values (NCHW), the bias added, each output rounded once.
std::vector<double> ConvFloat64(const dnn::Conv2dGeometry& g, const std::vector<uint16_t>& x,
                                const std::vector<uint16_t>& w, const std::vector<uint16_t>* bias,
                                std::vector<double>* magnitude) {
  const int64_t icg = g.c / g.groups, ocg = g.oc / g.groups;
  std::vector<double> y(static_cast<size_t>(g.n * g.oc * g.oh * g.ow));
  magnitude->assign(y.size(), 0.0);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t o = 0; o < g.oc; ++o) {
      const int64_t grp = o / ocg;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          double sum = bias != nullptr ? F((*bias)[static_cast<size_t>(o)]) : 0.0, mag = std::fabs(sum);
          for (int64_t ci = 0; ci < icg; ++ci) {
            for (int64_t ky = 0; ky < g.kh; ++ky) {
              for (int64_t kx = 0; kx < g.kw; ++kx) {
                const int64_t iy = oy * g.stride_h - g.pad_top + ky * g.dilation_h;
                const int64_t ix = ox * g.stride_w - g.pad_left + kx * g.dilation_w;
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                const double t = F(x[static_cast<size_t>(((n * g.c + grp * icg + ci) * g.h + iy) * g.w + ix)]) *
                                 F(w[static_cast<size_t>(((o * icg + ci) * g.kh + ky) * g.kw + kx)]);
                sum += t;
                mag += std::fabs(t);
              }
            }
          }
          const size_t at = static_cast<size_t>(((n * g.oc + o) * g.oh + oy) * g.ow + ox);
          y[at] = sum;
          (*magnitude)[at] = mag;
        }
      }
    }
  }
  return y;
}

dnn::Conv2dGeometry Geometry(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t kh, int64_t kw,
                             int64_t groups, int64_t stride, int64_t pad, int64_t dilation) {
  dnn::Conv2dGeometry g;
  g.n = n;
  g.c = c;
  g.h = h;
  g.w = w;
  g.oc = oc;
  g.kh = kh;
  g.kw = kw;
  g.groups = groups;
  g.stride_h = g.stride_w = stride;
  g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = pad;
  g.dilation_h = g.dilation_w = dilation;
  g.oh = (h + 2 * pad - dilation * (kh - 1) - 1) / stride + 1;
  g.ow = (w + 2 * pad - dilation * (kw - 1) - 1) / stride + 1;
  return g;
}

TEST(OneDnnPrimitives, Bf16ConvolutionIsTheFloat64ConvolutionRoundedOnce) {
  SKIP_WITHOUT(dnn::bf16_available);
  const dnn::Conv2dGeometry cases[] = {
      Geometry(2, 3, 9, 7, 5, 3, 3, 1, 1, 1, 1),    // odd sizes, padding
      Geometry(1, 6, 8, 8, 16, 5, 5, 1, 1, 2, 1),   // the digits CNN's second convolution
      Geometry(3, 8, 11, 10, 6, 3, 3, 2, 2, 1, 1),  // groups, stride 2
      Geometry(1, 4, 12, 12, 4, 3, 3, 1, 1, 2, 2),  // dilation
      Geometry(2, 16, 5, 5, 32, 1, 1, 1, 1, 0, 1),  // 1x1
  };
  uint32_t seed = 50;
  for (const dnn::Conv2dGeometry& g : cases) {
    for (bool with_bias : {false, true}) {
      const std::vector<uint16_t> x = RandomBf16(static_cast<size_t>(g.n * g.c * g.h * g.w), seed++);
      const std::vector<uint16_t> w = RandomBf16(static_cast<size_t>(g.oc * g.c / g.groups * g.kh * g.kw), seed++);
      const std::vector<uint16_t> b = RandomBf16(static_cast<size_t>(g.oc), seed++);
      std::vector<uint16_t> y(static_cast<size_t>(g.n * g.oc * g.oh * g.ow), 0xFFFF);
      dnn::bf16_conv2d_forward(g, x.data(), w.data(), with_bias ? b.data() : nullptr, y.data());
      std::vector<double> mag;
      const std::vector<double> want = ConvFloat64(g, x, w, with_bias ? &b : nullptr, &mag);
      for (size_t i = 0; i < y.size(); ++i) {
        // One rounding to bfloat16 (half an ulp: 2^-9 relative) after float32 sums.
        ASSERT_NEAR(F(y[i]), want[i], std::ldexp(std::fabs(want[i]), -8) + 1e-5 * mag[i])
            << "case " << g.c << "->" << g.oc << " " << g.kh << "x" << g.kw << " groups " << g.groups << " bias "
            << with_bias << " at " << i;
      }
    }
  }
}

TEST(OneDnnPrimitives, ARepeatedShapeBuildsNoNewPrimitive) {
  SKIP_WITHOUT(dnn::bf16_available);
  // A shape no other test uses.
  const int64_t m = 19, n = 23, k = 29;
  const std::vector<uint16_t> a = RandomBf16(static_cast<size_t>(m * k), 90),
                              b = RandomBf16(static_cast<size_t>(k * n), 91);
  std::vector<float> c(static_cast<size_t>(m * n));
  const dnn::PrimitiveCacheStats before = dnn::primitive_cache_stats();
  dnn::bf16_matmul(m, n, k, a.data(), k, 1, b.data(), n, 1, 0.0f, c.data(), n);
  const dnn::PrimitiveCacheStats first = dnn::primitive_cache_stats();
  EXPECT_EQ(first.built, before.built + 1);
  const std::vector<float> once = c;
  dnn::bf16_matmul(m, n, k, a.data(), k, 1, b.data(), n, 1, 0.0f, c.data(), n);
  const dnn::PrimitiveCacheStats second = dnn::primitive_cache_stats();
  EXPECT_EQ(second.built, first.built) << "the second call built a primitive";
  EXPECT_EQ(second.hits, first.hits + 1);
  EXPECT_EQ(c, once);
  // beta 1 is another primitive (the sum post-op is fixed in it).
  dnn::bf16_matmul(m, n, k, a.data(), k, 1, b.data(), n, 1, 1.0f, c.data(), n);
  EXPECT_EQ(dnn::primitive_cache_stats().built, second.built + 1);
  for (size_t i = 0; i < c.size(); ++i) EXPECT_FLOAT_EQ(c[i], 2 * once[i]);
}

TEST(OneDnnPrimitives, TheCacheStaysWithinItsCapacity) {
  SKIP_WITHOUT(dnn::int8_available);
  const int64_t n = 16, k = 8;
  const std::vector<uint8_t> a = RandomInts<uint8_t>(static_cast<size_t>(400 * k), 0, 255, 5);
  const std::vector<int8_t> w = RandomInts<int8_t>(static_cast<size_t>(n * k), -128, 127, 6);
  std::vector<int32_t> c(static_cast<size_t>(400 * n));
  const int64_t shapes = static_cast<int64_t>(dnn::kPrimitiveCacheCapacity) + 10;
  for (int64_t m = 100; m < 100 + shapes; ++m) dnn::int8_matmul(m, n, k, a.data(), k, w.data(), k, c.data(), n);
  const dnn::PrimitiveCacheStats full = dnn::primitive_cache_stats();
  EXPECT_LE(full.size, dnn::kPrimitiveCacheCapacity);
  EXPECT_GE(full.evicted, 10);
  // The least recently used went first: the first shape is built again, the last is cached.
  dnn::int8_matmul(100 + shapes - 1, n, k, a.data(), k, w.data(), k, c.data(), n);
  EXPECT_EQ(dnn::primitive_cache_stats().built, full.built);
  dnn::int8_matmul(100, n, k, a.data(), k, w.data(), k, c.data(), n);
  EXPECT_EQ(dnn::primitive_cache_stats().built, full.built + 1);
  EXPECT_EQ(std::vector<int32_t>(c.begin(), c.begin() + 100 * n), ReferenceInt8(100, n, k, a, k, w, k));
}

TEST(OneDnnPrimitives, ThreadsShareAPrimitive) {
  SKIP_WITHOUT(dnn::bf16_available);
  const int64_t m = 64, n = 96, k = 160;
  const std::vector<uint16_t> a = RandomBf16(static_cast<size_t>(m * k), 70),
                              b = RandomBf16(static_cast<size_t>(k * n), 71);
  std::vector<float> want(static_cast<size_t>(m * n));
  dnn::bf16_matmul(m, n, k, a.data(), k, 1, b.data(), n, 1, 0.0f, want.data(), n);
  std::vector<std::vector<float>> got(4, std::vector<float>(want.size()));
  std::vector<std::thread> threads;
  for (auto& out : got) {
    threads.emplace_back([&, p = out.data()] {
      for (int rep = 0; rep < 20; ++rep) dnn::bf16_matmul(m, n, k, a.data(), k, 1, b.data(), n, 1, 0.0f, p, n);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& out : got) EXPECT_EQ(out, want);
}

TEST(OneDnnPrimitives, TheImplementationIsNotAReferencePath) {
  SKIP_WITHOUT(dnn::bf16_available);
  // oneDNN's reference kernels ("ref:any") would mean a primitive built in a form no JIT kernel
  // takes (the run-time output scales trap of oneDNN 2.6: onednn_primitives.h).
  const std::string impl = dnn::bf16_matmul_impl(256, 256, 256, 256, 1, 256, 1, 256, 0.0f);
  EXPECT_EQ(impl.find("ref"), std::string::npos) << impl;
  std::string why;
  if (dnn::int8_available(&why)) {
    const std::string i8 = dnn::int8_matmul_impl(32, 1024, 1024, 1024, 1024, 1024);
    EXPECT_EQ(i8.find("ref"), std::string::npos) << i8;
  }
}

TEST(OneDnnPrimitives, TheChoiceFollowsTheMeasuredSizeClasses) {
  SKIP_WITHOUT(dnn::bf16_available);
  using C = cpu::Bf16GemmCandidate;
  if (const std::optional<C> forced = cpu::bf16_gemm_forced_candidate()) {
    // ANVIL_BF16_GEMM decides every shape.
    EXPECT_EQ(cpu::bf16_gemm_candidate_for(2048, 2048, 2048), *forced);
    EXPECT_EQ(cpu::bf16_gemm_candidate_for(256, 10, 1024), *forced);
    return;
  }
  // int8: Anvil's kernels at every size, on AMX-INT8 (tiles from 16 rows) as on AVX512-VNNI
  // (int8_gemm.cc's table).
  const auto expect_anvil_int8 = [] {
    if (!cpu::int8_gemm_candidate_unavailable_reason(cpu::Int8GemmCandidate::kOneDnn).empty()) return;
    if (std::getenv("ANVIL_INT8_GEMM") != nullptr) return;
    for (const int64_t m : {1, 16, 32, 256, 2048})
      EXPECT_EQ(cpu::int8_gemm_candidate_for(m, 1024, 1024), cpu::Int8GemmCandidate::kAnvil) << m;
  };
  if (cpu::isa_at_least(CpuIsa::kAmx)) {
    // oneDNN's AMX kernels for every product worth tiles.
    EXPECT_EQ(cpu::bf16_gemm_candidate_for(2048, 2048, 2048), C::kOneDnn);
    EXPECT_EQ(cpu::bf16_gemm_candidate_for(8, 8, 8), C::kAnvil);
    expect_anvil_int8();
    return;
  }
  // AVX-512-BF16 (bf16_gemm.cc's table): oneDNN for narrow products with a long inner
  // dimension, Anvil's kernel elsewhere.
  EXPECT_EQ(cpu::bf16_gemm_candidate_for(256, 10, 1024), C::kOneDnn);
  EXPECT_EQ(cpu::bf16_gemm_candidate_for(256, 16, 1024), C::kOneDnn);
  EXPECT_EQ(cpu::bf16_gemm_candidate_for(10, 1024, 256), C::kOneDnn);
  EXPECT_EQ(cpu::bf16_gemm_candidate_for(1, 1024, 1024), C::kOneDnn);
  EXPECT_EQ(cpu::bf16_gemm_candidate_for(2048, 2048, 2048), C::kAnvil);
  EXPECT_EQ(cpu::bf16_gemm_candidate_for(256, 1024, 1024), C::kAnvil);
  EXPECT_EQ(cpu::bf16_gemm_candidate_for(256, 1024, 10), C::kAnvil);
  EXPECT_EQ(cpu::bf16_gemm_candidate_for(64, 10, 84), C::kAnvil);
  EXPECT_EQ(cpu::bf16_gemm_candidate_for(256, 24, 1024), C::kAnvil);
  // Below the avx512 level bfloat16 products are widened: oneDNN is never chosen.
  {
    const cpu::ScopedIsa lower(CpuIsa::kAvx2);
    EXPECT_EQ(cpu::bf16_gemm_candidate_for(256, 10, 1024), C::kAnvil);
  }
  expect_anvil_int8();
}

TEST(OneDnnPrimitives, ConvolutionForwardTakesOneDnnFromSixInputChannels) {
  SKIP_WITHOUT(dnn::bf16_available);
  if (cpu::bf16_gemm_forced_candidate() || cpu::isa_at_least(CpuIsa::kAmx)) {
    GTEST_SKIP() << "the choice is forced (ANVIL_BF16_GEMM) or oneDNN is taken throughout (amx level)";
  }
  // Shapes no other test builds: a primitive built means the op ran on oneDNN.
  WindowParams p;
  p.kernel = {3, 3};
  p.padding = {1, 1, 1, 1};
  const auto built_by = [&](int64_t channels) {
    manual_seed(8);
    const Tensor x = randn({3, channels, 11, 13}).to(kBFloat16), w = randn({5, channels, 3, 3}).to(kBFloat16);
    const int64_t before = dnn::primitive_cache_stats().built;
    const Tensor y = convolution(x, w, Tensor(), p, 1);
    // Whichever path ran, the result is the float32 convolution's rounded once.
    const Tensor want = convolution(x.to(kFloat32), w.to(kFloat32), Tensor(), p, 1);
    EXPECT_TRUE(allclose(y.to(kFloat32), want, 1e-2, 1e-2)) << channels << " channels";
    return dnn::primitive_cache_stats().built - before;
  };
  EXPECT_GE(built_by(6), 1) << "6 input channels: oneDNN's convolution (conv_bf16.cc)";
  EXPECT_EQ(built_by(3), 0) << "3 input channels: Anvil's path";
}

TEST(OneDnnPrimitives, UnavailableSaysWhy) {
  std::string why;
  if (dnn::available(&why)) {
    EXPECT_TRUE(why.empty());
    EXPECT_EQ(dnn::version().rfind("oneDNN 2.", 0), 0u) << dnn::version();
    return;
  }
  // Where libdnnl.so.2 is absent the reason names it and its package, and the primitives throw.
  EXPECT_NE(why.find("libdnnl"), std::string::npos) << why;
  std::vector<int32_t> c(1);
  const uint8_t a = 1;
  const int8_t w = 1;
  EXPECT_THROW(dnn::int8_matmul(1, 1, 1, &a, 1, &w, 1, c.data(), 1), Error);
}

}  // namespace
}  // namespace anvil
