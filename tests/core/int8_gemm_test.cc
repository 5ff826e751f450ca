// The int8 GEMM (core/backend/cpu/int8_gemm.h): every kernel available at this ISA level, and
// the AMX kernel on emulated tiles, against sums computed here in int64 (the definition), bit
// for bit: odd shapes in every direction, k past a chunk, strides, extreme values at the
// largest k, operands that end at an inaccessible page, and column splits. ctest reruns these
// at lower ISA levels (tests/core/CMakeLists.txt), where fewer kernels are available.
#include "core/backend/cpu/int8_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/backend/cpu/isa.h"
#include "core/util/cpu_features.h"
#include "tests/core/guarded_buffer.h"
#include "tests/core/test_util.h"

namespace anvil {
namespace {

using cpu::Int8GemmKernel;

// A way to run the product: a kernel of this level, or the AMX kernel on emulated tiles.
struct Path {
  std::string name;
  Int8GemmKernel pack_for;
  bool emulated_amx;
};

std::vector<Path> Paths() {
  std::vector<Path> out;
  bool vnni = false;
  for (Int8GemmKernel k : cpu::available_int8_gemm_kernels()) {
    out.push_back({cpu::int8_gemm_kernel_name(k), k, false});
    vnni = vnni || k == Int8GemmKernel::kAvx512Vnni;
  }
  // The emulation needs no instruction set, but reads the layout packed for VNNI or AMX.
  if (vnni) out.push_back({"anvil-amx-int8 on emulated tiles", Int8GemmKernel::kAvx512Vnni, true});
  return out;
}

void RunPath(const Path& path, int64_t m, const uint8_t* a, int64_t lda, const cpu::PackedInt8Weight& w, int64_t j0,
             int64_t j1, int32_t* c, int64_t ldc) {
  if (path.emulated_amx) {
    cpu::int8_gemm_amx_emulated(m, a, lda, w, j0, j1, c, ldc);
  } else {
    cpu::int8_gemm_columns(m, a, lda, w, j0, j1, c, ldc);
  }
}

std::vector<uint8_t> RandomU8(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u(0, 255);
  std::vector<uint8_t> v(count);
  for (auto& x : v) x = static_cast<uint8_t>(u(rng));
  return v;
}

std::vector<int8_t> RandomS8(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u(-128, 127);
  std::vector<int8_t> v(count);
  for (auto& x : v) x = static_cast<int8_t>(u(rng));
  return v;
}

// C (rows ldc apart) against sum_p A[i, p] * W[j, p] in int64 for j in [j0, j1); every other
// element of C (the columns outside, the gap past n) must still hold `sentinel`.
::testing::AssertionResult MatchesDefinition(const int32_t* c, int64_t ldc, int64_t m, int64_t n, int64_t k,
                                             const uint8_t* a, int64_t lda, const int8_t* w, int64_t ldw, int64_t j0,
                                             int64_t j1, int32_t sentinel) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const int32_t got = c[i * ldc + j];
      if (j < j0 || j >= j1) {
        if (got != sentinel) return ::testing::AssertionFailure() << "C[" << i << ", " << j << "] written (outside)";
        continue;
      }
      int64_t ref = 0;
      for (int64_t p = 0; p < k; ++p) ref += int64_t{a[i * lda + p]} * int64_t{w[j * ldw + p]};
      if (int64_t{got} != ref) {
        return ::testing::AssertionFailure() << "C[" << i << ", " << j << "] = " << got << ", expected " << ref;
      }
    }
  }
  (void)n;
  return ::testing::AssertionSuccess();
}

constexpr int32_t kSentinel = -777;

// One product through `path` with strides lda = k + pad_a and ldc = n + pad_c, W rows ldw = k
// + pad_w apart.
::testing::AssertionResult Check(const Path& path, int64_t m, int64_t n, int64_t k, uint32_t seed, int64_t pad_a = 0,
                                 int64_t pad_c = 0, int64_t pad_w = 0) {
  const int64_t lda = k + pad_a, ldc = n + pad_c, ldw = k + pad_w;
  const auto a = RandomU8(static_cast<size_t>(m * lda), seed);
  const auto w = RandomS8(static_cast<size_t>(n * ldw), seed + 1000);
  const cpu::PackedInt8Weight packed = cpu::pack_int8_weight(w.data(), n, k, ldw, path.pack_for);
  std::vector<int32_t> c(static_cast<size_t>(m * ldc), kSentinel);
  RunPath(path, m, a.data(), lda, packed, 0, n, c.data(), ldc);
  return MatchesDefinition(c.data(), ldc, m, n, k, a.data(), lda, w.data(), ldw, 0, n, kSentinel);
}

TEST(Int8Gemm, EveryKernelEqualsTheDefinitionOnOddShapes) {
  const int64_t ms[] = {1, 3, 12, 13, 17, 37};
  const int64_t ns[] = {1, 15, 17, 33};
  const int64_t ks[] = {1, 3, 17, 63, 65, 1000};
  for (const Path& path : Paths()) {
    uint32_t seed = 1;
    for (int64_t m : ms) {
      for (int64_t n : ns) {
        for (int64_t k : ks) {
          ASSERT_TRUE(Check(path, m, n, k, seed++)) << path.name << ": m " << m << " n " << n << " k " << k;
        }
      }
    }
  }
}

// Past each block: a k chunk (AVX2 and AMX 1024, VNNI 2048) with a tail, k = 4096, more rows
// than a row block (AMX 128, VNNI 96 and 12, AVX2 6) and more panels than a group (VNNI 8 x 32
// columns), n = 1000.
TEST(Int8Gemm, EveryKernelEqualsTheDefinitionPastEachBlock) {
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{1, 1000, 1000}, {2, 300, 4096}, {20, 40, 4096}, {40, 1000, 65},
                          {130, 70, 1100}, {5, 33, 2049},  {33, 257, 1025}};
  for (const Path& path : Paths()) {
    uint32_t seed = 100;
    for (const Shape& s : shapes) {
      ASSERT_TRUE(Check(path, s.m, s.n, s.k, seed++)) << path.name << ": m " << s.m << " n " << s.n << " k " << s.k;
    }
  }
}

TEST(Int8Gemm, EveryKernelHonoursStrides) {
  for (const Path& path : Paths()) {
    uint32_t seed = 200;
    for (int64_t k : {5, 64, 67}) {
      ASSERT_TRUE(Check(path, 19, 35, k, seed++, /*pad_a=*/7, /*pad_c=*/5, /*pad_w=*/3)) << path.name << " k " << k;
      ASSERT_TRUE(Check(path, 2, 16, k, seed++, /*pad_a=*/64, /*pad_c=*/16, /*pad_w=*/1)) << path.name << " k " << k;
    }
  }
}

// The largest sums there are: 255 x -128 and 255 x 127 over k = kMaxInt8GemmK, within a few
// units of int32's ends. A kernel that adds in 16 bits anywhere (vpmaddubsw) saturates here.
TEST(Int8Gemm, ExtremeValuesAtTheLargestKDoNotSaturate) {
  const int64_t m = 17, n = 17, k = cpu::kMaxInt8GemmK;
  const std::vector<uint8_t> a(static_cast<size_t>(m * k), 255);
  for (int8_t value : {int8_t{-128}, int8_t{127}}) {
    const std::vector<int8_t> w(static_cast<size_t>(n * k), value);
    const int32_t expected = static_cast<int32_t>(int64_t{255} * value * k);
    for (const Path& path : Paths()) {
      const cpu::PackedInt8Weight packed = cpu::pack_int8_weight(w.data(), n, k, k, path.pack_for);
      EXPECT_EQ(packed.row_sums()[0], int32_t{value} * static_cast<int32_t>(k));
      std::vector<int32_t> c(static_cast<size_t>(m * n), 0);
      RunPath(path, m, a.data(), k, packed, 0, n, c.data(), n);
      for (size_t e = 0; e < c.size(); ++e) {
        ASSERT_EQ(c[e], expected) << path.name << " element " << e << " with W all " << int{value};
      }
    }
  }
}

// A, W and C each ending (or starting) exactly at an inaccessible page: reading a byte past A's
// last row (a k tail read as a whole word or tile row) or writing past C faults at once.
TEST(Int8Gemm, OperandsAtAGuardPage) {
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{1, 1, 1}, {1, 17, 3}, {13, 33, 17}, {17, 40, 63}, {33, 15, 65}, {3, 100, 1001}};
  for (const Path& path : Paths()) {
    uint32_t seed = 300;
    for (const Shape& s : shapes) {
      for (bool after : {true, false}) {
        const auto a = RandomU8(static_cast<size_t>(s.m * s.k), seed);
        const auto w = RandomS8(static_cast<size_t>(s.n * s.k), seed + 1);
        ++seed;
        test::GuardedBuffer<uint8_t> ga(a, after);
        test::GuardedBuffer<int8_t> gw(w, after);
        test::GuardedBuffer<int32_t> gc(std::vector<int32_t>(static_cast<size_t>(s.m * s.n), kSentinel), after);
        const cpu::PackedInt8Weight packed = cpu::pack_int8_weight(gw.data(), s.n, s.k, s.k, path.pack_for);
        RunPath(path, s.m, ga.data(), s.k, packed, 0, s.n, gc.data(), s.n);
        ASSERT_TRUE(MatchesDefinition(gc.data(), s.n, s.m, s.n, s.k, a.data(), s.k, w.data(), s.k, 0, s.n, kSentinel))
            << path.name << ": m " << s.m << " n " << s.n << " k " << s.k
            << (after ? ", guard after" : ", guard before");
      }
    }
  }
}

// Column blocks as a pool splits them: each call writes its columns only, including a block
// that starts in the middle of a 32-column VNNI panel and one ending at an odd n.
TEST(Int8Gemm, ColumnSplitsWriteTheirColumnsOnly) {
  const int64_t m = 21, n = 70, k = 131;
  const auto a = RandomU8(static_cast<size_t>(m * k), 400);
  const auto w = RandomS8(static_cast<size_t>(n * k), 401);
  const std::vector<std::pair<int64_t, int64_t>> splits = {{0, 16}, {16, 48}, {48, 70}, {32, 64}, {64, 70}, {16, 16}};
  for (const Path& path : Paths()) {
    const cpu::PackedInt8Weight packed = cpu::pack_int8_weight(w.data(), n, k, k, path.pack_for);
    for (const auto& [j0, j1] : splits) {
      std::vector<int32_t> c(static_cast<size_t>(m * n), kSentinel);
      RunPath(path, m, a.data(), k, packed, j0, j1, c.data(), n);
      ASSERT_TRUE(MatchesDefinition(c.data(), n, m, n, k, a.data(), k, w.data(), k, j0, j1, kSentinel))
          << path.name << ": columns [" << j0 << ", " << j1 << ")";
    }
    // The whole product from three calls equals one call.
    std::vector<int32_t> whole(static_cast<size_t>(m * n)), parts(static_cast<size_t>(m * n));
    RunPath(path, m, a.data(), k, packed, 0, n, whole.data(), n);
    for (const auto& [j0, j1] : {std::pair<int64_t, int64_t>{0, 16}, {16, 48}, {48, 70}}) {
      RunPath(path, m, a.data(), k, packed, j0, j1, parts.data(), n);
    }
    EXPECT_EQ(whole, parts) << path.name;
  }
}

TEST(Int8Gemm, EmptyProducts) {
  for (const Path& path : Paths()) {
    const std::vector<int8_t> w(40, 3);
    const cpu::PackedInt8Weight packed = cpu::pack_int8_weight(w.data(), 20, 0, 0, path.pack_for);
    std::vector<int32_t> c(3 * 20, kSentinel);
    const uint8_t a[1] = {9};
    RunPath(path, 3, a, 0, packed, 0, 20, c.data(), 20);
    for (int32_t x : c) ASSERT_EQ(x, 0) << path.name << ": k = 0 is a sum of nothing";
    RunPath(path, 0, a, 0, packed, 0, 20, nullptr, 20);  // m = 0 reads and writes nothing
  }
}

TEST(Int8Gemm, TheSelectedKernelFollowsTheIsaLevel) {
  const CpuFeatures& f = cpu_features();
  const CpuIsa level = cpu::active_isa();
  const Int8GemmKernel selected = cpu::selected_int8_gemm();
  if (level >= CpuIsa::kAmx && cpu::int8_gemm_unavailable_reason(Int8GemmKernel::kAmx).empty()) {
    EXPECT_EQ(selected, Int8GemmKernel::kAmx);
  } else if (level >= CpuIsa::kAvx512 && f.avx512_vnni) {
    EXPECT_EQ(selected, Int8GemmKernel::kAvx512Vnni);
  } else if (level >= CpuIsa::kAvx2) {
    EXPECT_EQ(selected, Int8GemmKernel::kAvx2);
  } else {
    EXPECT_EQ(selected, Int8GemmKernel::kReference);
  }
  const auto available = cpu::available_int8_gemm_kernels();
  EXPECT_NE(std::find(available.begin(), available.end(), selected), available.end());
  if (level >= CpuIsa::kAvx2) {
    cpu::ScopedIsa generic(CpuIsa::kGeneric);
    EXPECT_EQ(cpu::selected_int8_gemm(), Int8GemmKernel::kReference);
    EXPECT_EQ(cpu::available_int8_gemm_kernels(), std::vector<Int8GemmKernel>{Int8GemmKernel::kReference});
  }
  if (level >= CpuIsa::kAvx512) {
    cpu::ScopedIsa avx2(CpuIsa::kAvx2);
    EXPECT_EQ(cpu::selected_int8_gemm(), Int8GemmKernel::kAvx2);
  }
}

TEST(Int8Gemm, ErrorsSayWhatWasExpected) {
  const std::vector<int8_t> w(static_cast<size_t>(cpu::kMaxInt8GemmK + 1), 1);
  std::string msg =
      test::ErrorOf([&] { (void)cpu::pack_int8_weight(w.data(), 1, cpu::kMaxInt8GemmK + 1, cpu::kMaxInt8GemmK + 1); });
  EXPECT_NE(msg.find("at most 65536"), std::string::npos) << msg;
  EXPECT_NE(msg.find("65537"), std::string::npos) << msg;

  // A kernel that cannot run here is named, with the reason.
  for (Int8GemmKernel kernel : {Int8GemmKernel::kAvx2, Int8GemmKernel::kAvx512Vnni, Int8GemmKernel::kAmx}) {
    const std::string why = cpu::int8_gemm_unavailable_reason(kernel);
    if (why.empty()) continue;
    msg = test::ErrorOf([&] { (void)cpu::pack_int8_weight(w.data(), 1, 4, 4, kernel); });
    EXPECT_NE(msg.find(cpu::int8_gemm_kernel_name(kernel)), std::string::npos) << msg;
    EXPECT_NE(msg.find(why), std::string::npos) << msg;
  }
  if (cpu::active_isa() >= CpuIsa::kAvx2) {
    cpu::ScopedIsa generic(CpuIsa::kGeneric);
    msg = test::ErrorOf([&] { (void)cpu::pack_int8_weight(w.data(), 1, 4, 4, Int8GemmKernel::kAvx2); });
    EXPECT_NE(msg.find("anvil-avx2-int8 (vpmaddwd) cannot run here"), std::string::npos) << msg;
    EXPECT_NE(msg.find("available: anvil-reference-int8"), std::string::npos) << msg;
  }

  const cpu::PackedInt8Weight packed = cpu::pack_int8_weight(w.data(), 40, 4, 4, Int8GemmKernel::kReference);
  std::vector<int32_t> c(40);
  const uint8_t a[4] = {};
  msg = test::ErrorOf([&] { cpu::int8_gemm_columns(1, a, 4, packed, 8, 40, c.data(), 40); });
  EXPECT_NE(msg.find("multiples of 16"), std::string::npos) << msg;
  msg = test::ErrorOf([&] { cpu::int8_gemm_columns(1, a, 4, packed, 16, 48, c.data(), 40); });
  EXPECT_NE(msg.find("outside [0, 40)"), std::string::npos) << msg;
  msg = test::ErrorOf([&] { cpu::int8_gemm_amx_emulated(1, a, 4, packed, 0, 40, c.data(), 40); });
  EXPECT_NE(msg.find("packed for anvil-reference-int8"), std::string::npos) << msg;
}

}  // namespace
}  // namespace anvil
