// The CPU probe, the ISA levels and the GEMM candidates: the probe against the kernel's own
// view (/proc/cpuinfo), every candidate against float64 products on every layout, and the
// ops that use them at every level this CPU has, against float64 math and each other.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/anvil.h"
#include "core/backend/cpu/blas_library.h"
#include "core/backend/cpu/gemm.h"
#include "core/backend/cpu/int8_gemm.h"
#include "core/backend/cpu/isa.h"
#include "core/backend/cpu/kernel_info.h"
#include "core/util/cpu_features.h"
#include "tests/core/guarded_buffer.h"
#include "tests/core/test_util.h"

namespace anvil {
namespace {

using cpu::GemmKernel;

// The flags and model name Linux reports for the first CPU.
struct ProcCpu {
  std::set<std::string> flags;
  std::string model_name;
};

ProcCpu ReadProcCpuinfo() {
  ProcCpu out;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::string value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.erase(0, 1);
    if (key == "model name" && out.model_name.empty()) out.model_name = value;
    if (key == "flags" && out.flags.empty()) {
      std::istringstream words(value);
      for (std::string w; words >> w;) out.flags.insert(w);
    }
  }
  return out;
}

TEST(CpuFeatures, AgreeWithTheKernelsView) {
  const ProcCpu proc = ReadProcCpuinfo();
  if (proc.flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags on this system";
  const CpuFeatures& f = cpu_features();
  const auto has = [&](const char* flag) { return proc.flags.count(flag) > 0; };
  // Linux lists a flag only when the CPU has it and the kernel enabled its state: the same
  // two conditions the probe checks with cpuid and XGETBV.
  EXPECT_EQ(f.avx2, has("avx2"));
  EXPECT_EQ(f.fma, has("fma"));
  EXPECT_EQ(f.f16c, has("f16c"));
  EXPECT_EQ(f.bmi2, has("bmi2"));
  EXPECT_EQ(f.movbe, has("movbe"));
  EXPECT_EQ(f.lzcnt, has("abm") || has("lzcnt"));
  EXPECT_EQ(f.avx512f, has("avx512f"));
  EXPECT_EQ(f.avx512bw, has("avx512bw"));
  EXPECT_EQ(f.avx512vl, has("avx512vl"));
  EXPECT_EQ(f.avx512dq, has("avx512dq"));
  EXPECT_EQ(f.avx512_vnni, has("avx512_vnni"));
  EXPECT_EQ(f.avx512_bf16, has("avx512_bf16"));
  EXPECT_EQ(f.avx512_fp16, has("avx512_fp16"));
  EXPECT_EQ(f.avx_vnni, has("avx_vnni"));
  // AMX counts only with the tile permission, which Linux grants where it lists the flags.
  if (!has("amx_tile")) {
    EXPECT_FALSE(f.amx_tile);
  } else {
    EXPECT_TRUE(f.amx_tile || !f.amx_unavailable_reason.empty());
  }
  // Linux prints the brand string as cpuid gives it, trailing blanks removed.
  std::string proc_name;
  for (char ch : proc.model_name) {
    if (ch == ' ' && !proc_name.empty() && proc_name.back() == ' ') continue;
    proc_name += ch;
  }
  EXPECT_EQ(f.model_name, proc_name);
}

TEST(CpuFeatures, LevelFollowsTheFeatures) {
  const CpuFeatures& f = cpu_features();
  const CpuIsa level = detected_isa();
  EXPECT_EQ(level >= CpuIsa::kAvx2, f.x86_64_v3());
  EXPECT_EQ(level >= CpuIsa::kAvx512, f.x86_64_v3() && f.avx512_core());
  EXPECT_EQ(level == CpuIsa::kAmx, f.x86_64_v3() && f.avx512_core() && f.amx_tile && f.amx_bf16 && f.amx_int8);
  // The build baseline is x86-64-v3: a process that got here has it.
  EXPECT_TRUE(f.x86_64_v3()) << f.flags();
}

TEST(CpuFeatures, LevelNamesParseBackAndUnknownOnesAreClearErrors) {
  for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAmx}) {
    EXPECT_EQ(parse_isa(isa_name(isa)), isa);
  }
  EXPECT_EQ(parse_isa("AVX512"), CpuIsa::kAvx512);
  const std::string msg = test::ErrorOf([] { parse_isa("sse9"); });
  EXPECT_NE(msg.find("'sse9'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("generic, avx2, avx512 or amx"), std::string::npos) << msg;
}

TEST(CpuFeatures, ThreadsFollowTheAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  const int all = CPU_COUNT(&saved);
  EXPECT_LE(available_cpu_threads(), all);
  EXPECT_GE(available_cpu_threads(), 1);
  // Pinned to one CPU (this thread's mask: sched_getaffinity(0) reads the caller's), one thread.
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(available_cpu_threads(), 1);
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(available_cpu_threads() <= all, true);
}

// C = A B + beta C against float64, for one candidate and one layout. Each matrix occupies
// exactly its extent ((rows - 1) * ld + cols floats, as a view of a larger tensor may) with
// an inaccessible page right after it, or (guard_after false) right before it.
void CheckGemm(GemmKernel kernel, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float beta, int64_t pad,
               bool guard_after) {
  std::mt19937 rng(static_cast<unsigned>(m * 131 + n * 17 + k + (ta ? 5 : 0) + (tb ? 11 : 0)));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  // Leading dimensions wider than the matrix (pad), as views of a larger buffer give.
  const int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  const auto extent = [](int64_t rows, int64_t cols, int64_t ld) {
    return static_cast<size_t>((rows - 1) * ld + cols);
  };
  test::GuardedBuffer<float> a(extent(ta ? k : m, ta ? m : k, lda), guard_after),
      b(extent(tb ? n : k, tb ? k : n, ldb), guard_after), c(extent(m, n, ldc), guard_after);
  for (size_t i = 0; i < a.size(); ++i) a[i] = u(rng);
  for (size_t i = 0; i < b.size(); ++i) b[i] = u(rng);
  for (size_t i = 0; i < c.size(); ++i) c[i] = u(rng);
  const std::vector<float> c0(c.data(), c.data() + c.size());
  cpu::sgemm_with(kernel, ta, tb, m, n, k, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = beta * double(c0[i * ldc + j]), mag = std::fabs(ref);
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[p * lda + i] : a[i * lda + p];
        const double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        ref += av * bv;
        mag += std::fabs(av * bv);
      }
      ASSERT_NEAR(c[i * ldc + j], ref, 1e-6 * (mag + 1))
          << cpu::gemm_kernel_name(kernel) << " ta=" << ta << " tb=" << tb << " " << m << "x" << n << "x" << k
          << " beta=" << beta << " at (" << i << ", " << j << ")";
    }
    // The padding between rows of C is never written.
    for (int64_t j = n; j < ldc && i + 1 < m; ++j) ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]);
  }
}

TEST(GemmCandidates, EveryAvailableOneMatchesFloat64OnEveryLayout) {
  int checked = 0;
  for (const cpu::GemmCandidate& cand : cpu::gemm_candidates()) {
    if (!cand.available) continue;
    ++checked;
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        // Tile edges of the AVX-512 kernel (12 rows, 32 columns, 256-deep k chunks), the edge
        // cases of BLIS 0.9's small-matrix kernels that read too far (one row with k not a
        // multiple of 8, a two-column edge) and degenerate sizes.
        for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 1, 1},
                                                                         {1, 40, 7},
                                                                         {1, 16, 13},
                                                                         {6, 2, 11},
                                                                         {13, 1, 9},
                                                                         {12, 32, 256},
                                                                         {25, 33, 257},
                                                                         {37, 70, 19},
                                                                         {64, 16, 300}}) {
          for (float beta : {0.0f, 1.0f}) {
            for (bool guard_after : {true, false}) {
              CheckGemm(cand.kernel, ta, tb, m, n, k, beta, /*pad=*/3, guard_after);
            }
          }
        }
      }
    }
  }
  EXPECT_GE(checked, 1);
}

TEST(GemmCandidates, AnEmptyInnerDimensionLeavesBetaTimesC) {
  for (const cpu::GemmCandidate& cand : cpu::gemm_candidates()) {
    if (!cand.available) continue;
    std::vector<float> a(1), b(1), c(6, 2.5f);
    cpu::sgemm_with(cand.kernel, false, false, 2, 3, 0, a.data(), 1, b.data(), 3, 1.0f, c.data(), 3);
    for (float v : c) EXPECT_EQ(v, 2.5f) << cand.name;
    cpu::sgemm_with(cand.kernel, false, false, 2, 3, 0, a.data(), 1, b.data(), 3, 0.0f, c.data(), 3);
    for (float v : c) EXPECT_EQ(v, 0.0f) << cand.name;
  }
}

bool GemmForced() { return std::getenv("ANVIL_GEMM") != nullptr && *std::getenv("ANVIL_GEMM") != '\0'; }

TEST(GemmCandidates, TheSelectedOneRunsAtTheLevelWhenAnyCan) {
  if (GemmForced()) {
    EXPECT_EQ(cpu::gemm_kernel_name(cpu::selected_gemm()), std::getenv("ANVIL_GEMM"));
    return;  // the user's choice, whatever its level
  }
  const std::vector<cpu::GemmCandidate> all = cpu::gemm_candidates();
  const cpu::GemmCandidate* selected = nullptr;
  for (const auto& c : all) {
    if (c.kernel == cpu::selected_gemm()) selected = &c;
  }
  ASSERT_NE(selected, nullptr);
  EXPECT_TRUE(selected->available) << selected->name << ": " << selected->detail;
  const CpuIsa level = std::min(cpu::active_isa(), CpuIsa::kAvx512);
  bool any_at_level = false;
  for (const auto& c : all) any_at_level = any_at_level || (c.available && c.isa >= level);
  if (any_at_level) {
    // A library whose kernels are below the level (OpenBLAS pinned to its AVX2 or SSE3 core)
    // is never the choice while something runs at the level.
    EXPECT_GE(selected->isa, level) << selected->name << " (" << selected->detail << ") at level "
                                    << isa_name(cpu::active_isa());
  }
  const std::string desc = cpu::selected_gemm_description();
  EXPECT_EQ(desc.rfind(selected->name, 0), 0u) << desc;
}

// Small products have their own choice, under the same rule as the large ones (it runs at the
// level when any candidate can), and the product sgemm computes through it is right.
TEST(GemmCandidates, SmallProductsTakeAKernelThatRunsAtTheLevel) {
  const CpuIsa level = std::min(cpu::active_isa(), CpuIsa::kAvx512);
  struct Dims {
    int64_t m, n, k;
  };
  for (const Dims d : {Dims{32, 10, 84}, Dims{6, 784, 25}, Dims{32, 84, 120}, Dims{512, 512, 512}}) {
    SCOPED_TRACE(std::to_string(d.m) + "x" + std::to_string(d.n) + "x" + std::to_string(d.k));
    const cpu::GemmKernel k = cpu::gemm_kernel_for(d.m, d.n, d.k);
    if (GemmForced()) {
      EXPECT_EQ(cpu::gemm_kernel_name(k), std::getenv("ANVIL_GEMM"));
    } else {
      for (const auto& c : cpu::gemm_candidates()) {
        if (c.kernel == k) {
          EXPECT_TRUE(c.available) << c.name << ": " << c.detail;
          if (cpu::selected_gemm() != k) {
            EXPECT_GE(c.isa, level) << c.name << " (" << c.detail << ")";
          }
        }
      }
    }
    if (d.m * d.n * d.k >= (int64_t{1} << 19)) {
      EXPECT_EQ(k, cpu::selected_gemm());
    }
    // sgemm (the automatic choice) against float64, B transposed as a Linear weight is.
    std::mt19937 rng(static_cast<unsigned>(d.m * 131 + d.n));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> a(static_cast<size_t>(d.m * d.k)), b(static_cast<size_t>(d.n * d.k)),
        c(static_cast<size_t>(d.m * d.n), 7.0f);
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
    cpu::sgemm(false, true, d.m, d.n, d.k, a.data(), d.k, b.data(), d.k, 0.0f, c.data(), d.n);
    double worst = 0;
    for (int64_t i = 0; i < d.m; ++i) {
      for (int64_t j = 0; j < d.n; ++j) {
        double ref = 0;
        for (int64_t p = 0; p < d.k; ++p) ref += double(a[i * d.k + p]) * double(b[j * d.k + p]);
        worst = std::max(worst, std::fabs(c[i * d.n + j] - ref));
      }
    }
    EXPECT_LT(worst, 1e-4 * std::sqrt(static_cast<double>(d.k)));
  }
}

TEST(GemmCandidates, OpenBlasReportsItsCoreAndWhyItRuns) {
  const cpu::blas::OpenBlas& lib = cpu::blas::openblas();
  EXPECT_FALSE(lib.core.empty());
  EXPECT_FALSE(lib.core_source.empty());
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  if (env != nullptr && lib.core_source.find("another library") == std::string::npos) {
    // The user's choice stands, and is named.
    EXPECT_NE(lib.core_source.find(env), std::string::npos) << lib.core_source;
  }
  if (env == nullptr && detected_isa() >= CpuIsa::kAvx512 && cpu::requested_isa() >= CpuIsa::kAvx512 &&
      lib.core_source == "chosen from the CPU's features") {
    // Chosen from the features: an AVX-512 core, whatever the CPU's model name says.
    EXPECT_EQ(lib.core_isa, CpuIsa::kAvx512) << lib.core;
  }
}

TEST(GemmCandidates, AForcedCandidateThatCannotRunSaysWhy) {
  if (cpu::isa_at_least(CpuIsa::kAvx512)) {
    cpu::ScopedIsa lower(CpuIsa::kAvx2);
    float a = 1, b = 1, c = 0;
    const std::string msg = test::ErrorOf(
        [&] { cpu::sgemm_with(GemmKernel::kAnvilAvx512, false, false, 1, 1, 1, &a, 1, &b, 1, 0, &c, 1); });
    EXPECT_NE(msg.find("avx512"), std::string::npos) << msg;
    EXPECT_NE(msg.find("avx2"), std::string::npos) << msg;
  }
  const std::string msg = test::ErrorOf([] { cpu::ScopedIsa too_high(CpuIsa::kAmx); });
  if (detected_isa() != CpuIsa::kAmx) {
    EXPECT_NE(msg.find("supports up to"), std::string::npos) << msg;
  }
}

// mm, linear (with its transposed weight) and conv2d forward and backward at each level
// this CPU supports: each against the same computation in float64, and the levels against
// each other.
struct OpResults {
  std::vector<double> mm, linear, conv, conv_dx, conv_dw;
};

OpResults RunOps() {
  manual_seed(5);
  const Tensor a = randn({70, 300}), b = randn({300, 45});
  const Tensor x = randn({33, 130}), w = randn({40, 130}), bias = randn({40});
  Tensor img = randn({3, 4, 11, 9}).requires_grad_(), kern = randn({6, 4, 3, 3}).requires_grad_();
  WindowParams p;
  p.kernel = {3, 3};
  p.padding = {1, 1, 1, 1};
  Tensor y = convolution(img, kern, Tensor(), p, 1);
  y.sum().backward();
  OpResults r;
  r.mm = test::Vals(mm(a, b));
  r.linear = test::Vals(linear(x, w, bias));
  r.conv = test::Vals(y);
  r.conv_dx = test::Vals(img.grad());
  r.conv_dw = test::Vals(kern.grad());

  // Float64 references from the same inputs.
  const auto ref_mm = test::Vals(mm(a.to(kFloat64), b.to(kFloat64)));
  const auto ref_linear = test::Vals(linear(x.to(kFloat64), w.to(kFloat64), bias.to(kFloat64)));
  Tensor img64 = img.detach().to(kFloat64).requires_grad_(), kern64 = kern.detach().to(kFloat64).requires_grad_();
  Tensor y64 = convolution(img64, kern64, Tensor(), p, 1);
  y64.sum().backward();
  const auto expect_close = [](const std::vector<double>& got, const std::vector<double>& want, double tol,
                               const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i])))
          << what << " at " << i << ", ISA " << isa_name(cpu::active_isa());
    }
  };
  expect_close(r.mm, ref_mm, 2e-5, "mm");
  expect_close(r.linear, ref_linear, 2e-5, "linear");
  expect_close(r.conv, test::Vals(y64), 2e-5, "conv2d");
  expect_close(r.conv_dx, test::Vals(img64.grad()), 2e-5, "conv2d input gradient");
  expect_close(r.conv_dw, test::Vals(kern64.grad()), 2e-5, "conv2d weight gradient");
  return r;
}

TEST(CpuIsaLevels, OpsAgreeWithFloat64AndAcrossEveryLevel) {
  const OpResults top = RunOps();
  // A forced anvil-avx512 refuses to run below its level (GemmCandidates tests that).
  const int lowest =
      GemmForced() && std::string(std::getenv("ANVIL_GEMM")) == "anvil-avx512" ? static_cast<int>(CpuIsa::kAvx512) : 0;
  for (int lv = static_cast<int>(cpu::active_isa()) - 1; lv >= lowest; --lv) {
    cpu::ScopedIsa level(static_cast<CpuIsa>(lv));
    const OpResults r = RunOps();
    // Different kernels sum in different orders: equal to float32 rounding, not bitwise.
    for (size_t i = 0; i < top.mm.size(); ++i) ASSERT_NEAR(r.mm[i], top.mm[i], 1e-4 * (1 + std::fabs(top.mm[i])));
    for (size_t i = 0; i < top.conv_dw.size(); ++i) {
      ASSERT_NEAR(r.conv_dw[i], top.conv_dw[i], 1e-4 * (1 + std::fabs(top.conv_dw[i])));
    }
  }
}

TEST(CpuIsaLevels, TheSummaryNamesCpuLevelKernelAndThreads) {
  const CpuKernelInfo info = cpu_kernel_info();
  EXPECT_EQ(info.model, cpu_features().model_name);
  EXPECT_EQ(info.isa, std::string(isa_name(cpu::active_isa())));
  EXPECT_EQ(info.threads, get_num_threads());
  const std::string line = cpu_kernel_summary();
  EXPECT_EQ(info.int8_gemm, cpu::int8_gemm_kernel_name(cpu::selected_int8_gemm()));
  for (const std::string& part : {info.model, "ISA " + info.isa, "GEMM " + info.gemm,
                                  "bf16 GEMM " + info.bf16_gemm + ",", "int8 GEMM " + info.int8_gemm + ","}) {
    EXPECT_NE(line.find(part), std::string::npos) << part << " not in: " << line;
  }
}

// Run by ctest with ANVIL_CPU_ISA=sse9 (tests/core/CMakeLists.txt): the first kernel says
// what is wrong with the variable. Skipped in the ordinary run.
TEST(CpuIsaEnv, AnUnknownLevelIsAClearErrorFromTheFirstKernel) {
  const char* v = std::getenv("ANVIL_CPU_ISA");
  if (v == nullptr || std::string(v) != "sse9") GTEST_SKIP() << "runs with ANVIL_CPU_ISA=sse9 only";
  const std::string msg = test::ErrorOf([] { (void)cpu::active_isa(); });
  EXPECT_NE(msg.find("ANVIL_CPU_ISA"), std::string::npos) << msg;
  EXPECT_NE(msg.find("generic, avx2, avx512 or amx"), std::string::npos) << msg;
}

}  // namespace
}  // namespace anvil
