// The float32 product and the choice of its implementation (interface and why: gemm.h).
#include "core/backend/cpu/gemm.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/backend/cpu/blas_library.h"
#include "core/backend/cpu/isa.h"
#include "core/backend/cpu/sgemm_avx512.h"
#include "core/util/error.h"

namespace anvil::cpu {
namespace {

// The order of preference at each level, fastest first, from bench/gemm_bench.cc (the
// figures per CPU are in bench/RESULTS.md, "Float32 GEMM candidates"). A candidate is taken
// only if its kernels run at the level (see gemm.h), so a level's list may end in candidates
// below it: the fastest that can run.
const std::vector<GemmKernel>& Preference(CpuIsa level) {
  using K = GemmKernel;
  // Measured on AMD Zen 5 (one thread, 11 shapes from 10x128x128 to 1024^3): oneDNN is the
  // fastest or within 5 % on every shape at both levels (211-243 GFLOP/s at avx512, where
  // OpenBLAS's AVX-512 core reaches 61-229 and Anvil's kernel 86-218; the small products of
  // a training step show the widest gaps). generic runs the libraries as they detect the CPU.
  static const std::vector<K> generic = {K::kOpenBlas};
  static const std::vector<K> avx2 = {K::kOneDnn, K::kOpenBlas, K::kBlis};
  static const std::vector<K> avx512 = {K::kOneDnn, K::kOpenBlas, K::kAnvilAvx512, K::kBlis};
  switch (level) {
    case CpuIsa::kGeneric:
      return generic;
    case CpuIsa::kAvx2:
      return avx2;
    case CpuIsa::kAvx512:
    case CpuIsa::kAmx:
      return avx512;  // AMX tiles do not take float32
  }
  return generic;
}

// Small products, where a library's fixed cost per call (oneDNN checks its arguments and
// finds its JIT kernel on every call) outweighs its kernel's peak: measured on Zen 5 (one
// thread, the LeNet-5 and classifier-head products of bench/gemm_bench.cc; bench/RESULTS.md),
// OpenBLAS is 1.1-2.9x faster than oneDNN below 2^16 multiply-adds, and up to 2^19 where the
// rows or columns do not fill oneDNN's 16-wide AVX-512 blocks (6x784x25: 214 vs 172 GFLOP/s;
// 32x84x120: 114 vs 95); with n < 16 oneDNN stays ahead (128x10x128: 98 vs 62). At avx2 the
// gap is narrower and only the smallest products with at least 16 rows favour OpenBLAS.
bool SmallProduct(CpuIsa level, int64_t m, int64_t n, int64_t k) {
  const int64_t macs = m * n * k;
  if (level == CpuIsa::kAvx512 || level == CpuIsa::kAmx) {
    return macs < (int64_t{1} << 16) || (macs < (int64_t{1} << 19) && n >= 16 && (m < 16 || n % 16 != 0));
  }
  if (level == CpuIsa::kAvx2) return macs < (int64_t{1} << 16) && m >= 16;
  return false;
}

constexpr GemmKernel kAll[] = {GemmKernel::kAnvilAvx512, GemmKernel::kOpenBlas, GemmKernel::kBlis, GemmKernel::kOneDnn};

CpuIsa BlisIsa(const std::string& arch) {
  if (arch == "skx" || arch == "knl") return CpuIsa::kAvx512;
  if (arch == "haswell" || arch == "zen" || arch == "zen2" || arch == "zen3") return CpuIsa::kAvx2;
  return CpuIsa::kGeneric;
}

// What a candidate can do here: available, and the level of its kernels.
GemmCandidate Describe(GemmKernel kernel) {
  GemmCandidate c;
  c.kernel = kernel;
  c.name = gemm_kernel_name(kernel);
  std::string why;
  switch (kernel) {
    case GemmKernel::kAnvilAvx512:
      c.available = isa_at_least(CpuIsa::kAvx512);
      c.isa = CpuIsa::kAvx512;
      c.detail = c.available ? "AVX-512 register tiles" : "needs the avx512 ISA level";
      break;
    case GemmKernel::kOpenBlas: {
      const blas::OpenBlas& lib = blas::openblas();
      c.available = true;
      c.isa = lib.core_isa;
      c.detail = lib.core + ", " + lib.core_source;
      break;
    }
    case GemmKernel::kBlis:
      if (const blas::Blis* lib = blas::blis(&why)) {
        c.available = true;
        c.isa = BlisIsa(lib->arch);
        c.detail = lib->arch + ", " + lib->version + (lib->small_kernels_off ? ", sup kernels off" : "");
      } else {
        c.detail = why;
      }
      break;
    case GemmKernel::kOneDnn:
      if (const blas::OneDnn* lib = blas::onednn(&why)) {
        c.available = true;
        // oneDNN's JIT takes the CPU's best kernels up to the level it was capped at (none at
        // generic: blas_library.cc).
        c.isa = std::min(requested_isa() == CpuIsa::kGeneric ? detected_isa() : requested_isa(), CpuIsa::kAvx512);
        c.detail = "oneDNN " + lib->version;
      } else {
        c.detail = why;
      }
      break;
  }
  return c;
}

// Each candidate is described once, when first asked about (loading a library is not free:
// selection loads only the ones it tries); whether the own kernel runs depends on the active
// level, which tests may lower.
const GemmCandidate& Candidate(GemmKernel kernel) {
  static std::once_flag once[4];
  static GemmCandidate described[4];
  const int i = static_cast<int>(kernel);
  std::call_once(once[i], [&] { described[i] = Describe(kernel); });
  return described[i];
}

bool RunsAt(const GemmCandidate& c, CpuIsa level) {
  if (c.kernel == GemmKernel::kAnvilAvx512) return static_cast<int>(level) >= static_cast<int>(CpuIsa::kAvx512);
  return c.available && static_cast<int>(c.isa) >= static_cast<int>(std::min(level, CpuIsa::kAvx512));
}

std::optional<GemmKernel> Forced() {
  static const std::optional<GemmKernel> forced = []() -> std::optional<GemmKernel> {
    const char* v = std::getenv("ANVIL_GEMM");
    if (v == nullptr || *v == '\0') return std::nullopt;
    for (GemmKernel k : kAll) {
      if (gemm_kernel_name(k) == v) return k;
    }
    throw Error(std::string("ANVIL_GEMM='") + v + "': expected anvil-avx512, openblas, blis or onednn");
  }();
  return forced;
}

GemmKernel Select(CpuIsa level) {
  if (const std::optional<GemmKernel> f = Forced()) return *f;
  const auto find = [](GemmKernel k) -> const GemmCandidate& { return Candidate(k); };
  for (GemmKernel k : Preference(level)) {
    if (RunsAt(find(k), level)) return k;
  }
  // Nothing runs at the level (a library below it, no own kernel): the best that runs at all.
  for (CpuIsa lower = level; lower != CpuIsa::kGeneric;) {
    lower = static_cast<CpuIsa>(static_cast<int>(lower) - 1);
    for (GemmKernel k : Preference(lower)) {
      if (RunsAt(find(k), lower)) return k;
    }
  }
  return GemmKernel::kOpenBlas;
}

// The choice per level, made once per level.
GemmKernel Selected(CpuIsa level) {
  static std::once_flag once[4];
  static GemmKernel chosen[4];
  const int i = static_cast<int>(level);
  std::call_once(once[i], [&] { chosen[i] = Select(level); });
  return chosen[i];
}

// Small products (SmallProduct): OpenBLAS when its kernels run at the level, else the level's
// choice.
GemmKernel SelectedSmall(CpuIsa level) {
  static std::once_flag once[4];
  static GemmKernel chosen[4];
  const int i = static_cast<int>(level);
  std::call_once(once[i], [&] {
    chosen[i] = RunsAt(Candidate(GemmKernel::kOpenBlas), level) ? GemmKernel::kOpenBlas : Selected(level);
  });
  return chosen[i];
}

void AnvilSgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, float beta, float* c, int64_t ldc) {
  // The kernel reads each row of B contiguously; B^T (a Linear weight) is transposed into a
  // buffer first: k * n floats, small next to the m * n * k multiply-adds that read it.
  thread_local std::vector<float> b_rows;
  thread_local std::vector<int64_t> offsets;
  const float* bp = b;
  int64_t b_ld = ldb;
  if (tb) {
    b_rows.resize(static_cast<size_t>(k * n));
    constexpr int64_t kBlock = 16;
    for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
      for (int64_t p0 = 0; p0 < k; p0 += kBlock) {
        const int64_t j1 = std::min(n, j0 + kBlock), p1 = std::min(k, p0 + kBlock);
        for (int64_t j = j0; j < j1; ++j) {
          for (int64_t p = p0; p < p1; ++p) b_rows[p * n + j] = b[j * ldb + p];
        }
      }
    }
    bp = b_rows.data();
    b_ld = n;
  }
  offsets.resize(static_cast<size_t>(k));
  for (int64_t p = 0; p < k; ++p) offsets[p] = p * b_ld;
  sgemm_avx512(m, n, k, a, nullptr, ta ? 1 : lda, ta ? lda : 1, bp, offsets.data(), beta, c, ldc);
}

void Run(GemmKernel kernel, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
         const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    // An empty sum: C = beta C. Libraries differ here (oneDNN leaves C as it was for beta 0).
    if (beta == 0.0f) {
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    }
    return;
  }
  switch (kernel) {
    case GemmKernel::kAnvilAvx512:
      ANVIL_CHECK(isa_at_least(CpuIsa::kAvx512),
                  "GEMM kernel anvil-avx512 needs the avx512 ISA level; this process "
                  "runs at ",
                  isa_name(active_isa()));
      AnvilSgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
      return;
    case GemmKernel::kOpenBlas:
      blas::openblas().sgemm(blas::kRowMajor, ta ? blas::kTrans : blas::kNoTrans, tb ? blas::kTrans : blas::kNoTrans,
                             static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a,
                             static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
      return;
    case GemmKernel::kBlis: {
      // The reason is fetched only on failure: this runs for every product.
      const blas::Blis* lib = blas::blis();
      ANVIL_CHECK(lib != nullptr, "GEMM kernel blis is not available: ", Candidate(kernel).detail);
      const float one = 1.0f;
      // General strides: A(i, p) at a[i * rsa + p * csa]; no transpose flags needed.
      lib->sgemm(m, n, k, &one, a, ta ? 1 : lda, ta ? lda : 1, b, tb ? 1 : ldb, tb ? ldb : 1, &beta, c, ldc, 1);
      return;
    }
    case GemmKernel::kOneDnn: {
      const blas::OneDnn* lib = blas::onednn();
      ANVIL_CHECK(lib != nullptr, "GEMM kernel onednn is not available: ", Candidate(kernel).detail);
      // oneDNN's OpenMP would start a team per calling thread; Anvil's pool already splits.
      // The thread's OpenMP setting is restored after: another library of the process
      // (libtorch, in the benchmarks) may share the runtime and rely on it; and setting it
      // only once is not enough, since such a library may set it again between calls.
      const int previous = lib->omp_get_max_threads != nullptr ? lib->omp_get_max_threads() : 1;
      if (previous != 1) lib->omp_set_num_threads(1);
      const int status = lib->sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
      if (previous != 1) lib->omp_set_num_threads(previous);
      ANVIL_INTERNAL_ASSERT(status == 0, "dnnl_sgemm returned status ", status);
      return;
    }
  }
}

}  // namespace

std::string gemm_kernel_name(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::kAnvilAvx512:
      return "anvil-avx512";
    case GemmKernel::kOpenBlas:
      return "openblas";
    case GemmKernel::kBlis:
      return "blis";
    case GemmKernel::kOneDnn:
      return "onednn";
  }
  return "unknown";
}

std::vector<GemmCandidate> gemm_candidates() {
  std::vector<GemmCandidate> v;
  for (GemmKernel k : kAll) {
    v.push_back(Candidate(k));
    if (k == GemmKernel::kAnvilAvx512) v.back().available = isa_at_least(CpuIsa::kAvx512);
  }
  return v;
}

GemmKernel selected_gemm() { return Selected(active_isa()); }

GemmKernel gemm_kernel_for(int64_t m, int64_t n, int64_t k) {
  const CpuIsa level = active_isa();
  if (SmallProduct(level, m, n, k) && !Forced()) return SelectedSmall(level);
  return Selected(level);
}

namespace {
std::string Description(GemmKernel k) {
  const GemmCandidate& c = Candidate(k);
  if (k == GemmKernel::kOpenBlas) return c.name + " (" + blas::openblas().core + ")";
  if (k == GemmKernel::kBlis || k == GemmKernel::kOneDnn) return c.name + " (" + c.detail + ")";
  return c.name;
}
}  // namespace

std::string selected_gemm_description() {
  const GemmKernel k = selected_gemm();
  std::string d = Description(k);
  const GemmKernel small = Forced() ? k : SelectedSmall(active_isa());
  if (small != k) d += ", small products " + Description(small);
  return d;
}

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
           float beta, float* c, int64_t ldc) {
  Run(gemm_kernel_for(m, n, k), ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void sgemm_with(GemmKernel kernel, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  Run(kernel, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
           int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  blas::openblas().dgemm(blas::kRowMajor, ta ? blas::kTrans : blas::kNoTrans, tb ? blas::kTrans : blas::kNoTrans,
                         static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0, a, static_cast<int>(lda),
                         b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace anvil::cpu
