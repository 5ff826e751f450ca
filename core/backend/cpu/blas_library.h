// The BLAS libraries the CPU matrix products can run on, loaded at run time (dlopen, their
// symbols kept local: OpenBLAS and BLIS both export cblas_* and would otherwise collide).
//
// Why at run time: OpenBLAS picks its kernels once, when it is loaded, from the CPU's model,
// and falls back to its slowest (SSE3 "Prescott") kernels on a CPU it does not know — a VM's
// generic Xeon, or a CPU newer than the library. It reads OPENBLAS_CORETYPE at that moment,
// so Anvil sets it from the CPU's features (core/util/cpu_features.h) just before loading,
// unless the environment already sets it (kept as the user's choice) or another library of
// the process has loaded OpenBLAS first (then its choice stands, and is reported). BLIS gets
// the same treatment through BLIS_ARCH_TYPE; oneDNN chooses by features itself and is capped
// at the requested ISA level.
//
// OpenBLAS is required (float64 products and matrix-vector products always use it); BLIS and
// oneDNN are optional candidates for float32 products (core/backend/cpu/gemm.h).
// Thread-safe: each library is loaded once, on first use.
#pragma once

#include <cstdint>
#include <string>

#include "core/util/cpu_features.h"

namespace anvil::cpu::blas {

// Row-major products and matrix-vector products, CBLAS argument order.
struct OpenBlas {
  void (*sgemm)(int order, int ta, int tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                int ldb, float beta, float* c, int ldc) = nullptr;
  void (*dgemm)(int order, int ta, int tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
                int ldb, double beta, double* c, int ldc) = nullptr;
  void (*sgemv)(int order, int trans, int m, int n, float alpha, const float* a, int lda, const float* x, int incx,
                float beta, float* y, int incy) = nullptr;
  void (*dgemv)(int order, int trans, int m, int n, double alpha, const double* a, int lda, const double* x, int incx,
                double beta, double* y, int incy) = nullptr;
  std::string core;                    // openblas_get_corename(): "SkylakeX", "Haswell", "Prescott", ...
  CpuIsa core_isa = CpuIsa::kGeneric;  // the ISA level of that core's kernels
  std::string core_source;             // why this core: "set by Anvil", "OPENBLAS_CORETYPE in the environment", ...
};
// CBLAS constants, for the fields above.
inline constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

// Throws anvil::Error naming the library and the fix when OpenBLAS cannot be loaded.
const OpenBlas& openblas();

// BLIS's typed API with general strides: C = alpha A B + beta C, element (i, j) of X at
// x[i * rs + j * cs].
struct Blis {
  // C = alpha op(A) op(B) + beta C through BLIS's expert interface (bli_sgemm_ex); the runtime
  // argument is filled in by sgemm() below, which callers use.
  void (*sgemm_ex)(int transa, int transb, int64_t m, int64_t n, int64_t k, const float* alpha, const float* a,
                   int64_t rsa, int64_t csa, const float* b, int64_t rsb, int64_t csb, const float* beta, float* c,
                   int64_t rsc, int64_t csc, void* cntx, void* rntm) = nullptr;
  std::string arch;     // the sub-configuration in use: "skx", "haswell", "zen3", "generic", ...
  std::string version;  // "0.9.0"
  // BLIS 0.9's small-matrix ("sup") kernels for the haswell and zen families read past the end
  // of their operands (upstream issues #635 and #821, fixed after 0.9): a product whose matrix
  // ends at the end of a mapping faults. For that release each call passes a runtime object
  // that turns sup off, so products go through packing, which reads only the matrices.
  bool small_kernels_off = false;
  // BLIS 0.9.0's rntm_t (bli_type_defs.h), filled by bli_rntm_init_from_global once the
  // library's threads are set; copied per call, since BLIS attaches its pools to it.
  struct Runtime09 {
    bool auto_factor;
    int64_t num_threads;
    int64_t thrloop[6];
    bool pack_a, pack_b, l3_sup;
    void* sba_pool;
    void* pba;
  };
  Runtime09 runtime{};

  void sgemm(int64_t m, int64_t n, int64_t k, const float* alpha, const float* a, int64_t rsa, int64_t csa,
             const float* b, int64_t rsb, int64_t csb, const float* beta, float* c, int64_t rsc, int64_t csc) const;
};
// nullptr when libblis.so.4 is not installed; `why` (if given) receives the reason.
const Blis* blis(std::string* why = nullptr);

// oneDNN's row-major sgemm ('N'/'T' transposes); run single-threaded on the calling thread.
struct OneDnn {
  int (*sgemm)(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) = nullptr;
  void (*omp_set_num_threads)(int) = nullptr;  // its OpenMP runtime's, when it has one
  int (*omp_get_max_threads)() = nullptr;
  std::string version;     // "2.6.3"
  void* handle = nullptr;  // the library's dlopen handle: its primitive API (onednn_primitives.h)
};
const OneDnn* onednn(std::string* why = nullptr);

}  // namespace anvil::cpu::blas
