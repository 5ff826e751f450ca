// The float32 matrix product every CPU kernel calls (mm, bmm, linear, convolution's column
// products), and the choice of which implementation runs it: the one place that choice is
// made.
//
// Candidates: Anvil's own AVX-512 kernel (sgemm_avx512.h), OpenBLAS, BLIS and oneDNN
// (blas_library.h). Each ISA level has an order of preference, measured (bench/gemm_bench.cc,
// figures in bench/RESULTS.md); the first candidate that is available and whose kernels run
// at that level is used. A library whose kernels are below the level (OpenBLAS on a CPU it
// does not recognise runs SSE3 kernels) is passed over, so a blind spot in one library never
// costs the engine its speed. ANVIL_GEMM=anvil|openblas|blis|onednn forces a candidate (for
// benchmarks and tests); one that cannot run here is an error that says why.
//
// Thread-safe. Every call is single-threaded: callers split the work over Anvil's pool.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/util/cpu_features.h"

namespace anvil::cpu {

enum class GemmKernel { kAnvilAvx512, kOpenBlas, kBlis, kOneDnn };

// Row-major C[m, n] = A B + beta C with beta 0 (C is only written) or 1, where A is [m, k]
// (or [k, m] stored when ta: A^T is given) and B is [k, n] (or [n, k] when tb).
void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
           float beta, float* c, int64_t ldc);
// The same through one named candidate (tests and benchmarks compare them); throws when it
// is not available here.
void sgemm_with(GemmKernel kernel, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// Float64 runs on OpenBLAS.
void dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
           int64_t ldb, double beta, double* c, int64_t ldc);
// sgemm or dgemm by element type, for the kernels written once over float32 and float64. Any
// other type compiles to nothing: a kernel's dtype switch instantiates its float32/float64 path
// for every dtype it switches on, and runs it only for those two.
template <typename T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T beta,
          T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    sgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  } else if constexpr (std::is_same_v<T, double>) {
    dgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  }
}

struct GemmCandidate {
  GemmKernel kernel;
  std::string name;               // "anvil-avx512", "openblas", "blis", "onednn"
  bool available = false;         // it can run on this CPU, at the active level
  CpuIsa isa = CpuIsa::kGeneric;  // the level its kernels run at here
  std::string detail;             // the library's core or version, or why it is unavailable
};
std::vector<GemmCandidate> gemm_candidates();

// The candidate sgemm() uses now for large products (it follows the active ISA level:
// core/backend/cpu/isa.h), and the one it uses for a product of a given size: small products
// have their own order, since there a library's fixed cost per call decides (gemm.cc).
GemmKernel selected_gemm();
GemmKernel gemm_kernel_for(int64_t m, int64_t n, int64_t k);
std::string gemm_kernel_name(GemmKernel kernel);
// "anvil-avx512", "openblas (SkylakeX)" or "onednn (oneDNN 2.6.3), small products openblas
// (Cooperlake)": the selected kernels as the start line and every benchmark table name them.
std::string selected_gemm_description();

}  // namespace anvil::cpu
