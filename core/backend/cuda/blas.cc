#include "core/backend/cuda/blas.h"

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <limits>
#include <string>
#include <type_traits>

#include "core/backend/cuda/cuda_check.h"
#include "core/backend/cuda/runtime.h"
#include "core/util/error.h"

namespace anvil::cuda {

// cuBLAS is loaded with dlopen on the first GEMM instead of being linked: a process that
// never multiplies on a GPU never loads it (binaries start on machines without it), and its
// symbols stay local (RTLD_LOCAL). (Linked, it once broke the metrics server's thread
// creation, when that server ran on small fixed-size thread stacks.)
void* open_cuda_library(const std::string& soname, const char* purpose) {
  void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef ANVIL_CUDA_LIBRARY_DIR
  if (h == nullptr) h = dlopen((std::string(ANVIL_CUDA_LIBRARY_DIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
  if (h == nullptr) h = dlopen(("/usr/local/cuda/lib64/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
  ANVIL_CHECK(h != nullptr, "cannot load ", soname, " (", purpose, "): ", dlerror());
  return h;
}

const CublasApi& cublas() {
  static const CublasApi api = [] {
    const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* h = open_cuda_library(name, "cuBLAS, needed for matrix products on the GPU");
    CublasApi a;
    bind_cuda_symbol(h, name, "cublasCreate_v2", a.create);
    bind_cuda_symbol(h, name, "cublasSetStream_v2", a.set_stream);
    bind_cuda_symbol(h, name, "cublasGemmStridedBatchedEx", a.gemm_strided_batched);
    bind_cuda_symbol(h, name, "cublasGemmEx", a.gemm);
    bind_cuda_symbol(h, name, "cublasGetStatusName", a.status_name);
    bind_cuda_symbol(h, name, "cublasGetStatusString", a.status_string);
    return a;
  }();
  return api;
}

namespace {

std::atomic<bool> g_allow_tf32{false};

// Handles are per thread: cuBLAS handles are not safe to share between threads that set
// different streams. Never destroyed (thread exit at process end only).
thread_local std::array<cublasHandle_t, 64> tls_handles{};

template <typename T>
cudaDataType_t DataType() {
  if constexpr (std::is_same_v<T, float>)
    return CUDA_R_32F;
  else if constexpr (std::is_same_v<T, double>)
    return CUDA_R_64F;
  else if constexpr (std::is_same_v<T, Half>)
    return CUDA_R_16F;
  else
    return CUDA_R_16BF;
}

int CheckedInt(int64_t v, const char* what) {
  ANVIL_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "matrix ", what, " ", v,
              " exceeds cuBLAS's 32-bit limit");
  return static_cast<int>(v);
}

}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }

cublasHandle_t blas_handle(int device) {
  DeviceGuard guard(device);
  cublasHandle_t& h = tls_handles.at(static_cast<size_t>(device));
  if (h == nullptr) ANVIL_CUBLAS_CHECK(cublas().create(&h));
  ANVIL_CUBLAS_CHECK(cublas().set_stream(h, current_stream(device)));
  return h;
}

template <typename T>
void GemmStridedBatched(int device, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a,
                        int64_t lda, int64_t stride_a, const T* b, int64_t ldb, int64_t stride_b, float beta, T* c,
                        int64_t ldc, int64_t stride_c, int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  // A handle must be used with its own device current (mm/bmm callers set none).
  DeviceGuard guard(device);
  cublasHandle_t h = blas_handle(device);
  // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands, keep
  // the transpose flags, and the leading dimensions carry over unchanged.
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cudaDataType_t dt = DataType<T>();
  const bool is_double = std::is_same_v<T, double>;
  const cublasComputeType_t compute = is_double                                    ? CUBLAS_COMPUTE_64F
                                      : (std::is_same_v<T, float> && allow_tf32()) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                   : CUBLAS_COMPUTE_32F;
  const double alpha64 = 1.0, beta64 = beta;
  const float alpha32 = 1.0f, beta32 = beta;
  const void* alpha = is_double ? static_cast<const void*>(&alpha64) : static_cast<const void*>(&alpha32);
  const void* beta_p = is_double ? static_cast<const void*>(&beta64) : static_cast<const void*>(&beta32);
  ANVIL_CUBLAS_CHECK(cublas().gemm_strided_batched(
      h, tb, ta, CheckedInt(n, "size"), CheckedInt(m, "size"), CheckedInt(k, "size"), alpha, b, dt,
      CheckedInt(ldb, "stride"), stride_b, a, dt, CheckedInt(lda, "stride"), stride_a, beta_p, c, dt,
      CheckedInt(ldc, "stride"), stride_c, CheckedInt(batch, "batch"), compute, CUBLAS_GEMM_DEFAULT));
}

#define ANVIL_GEMM_INSTANCE(T)                                                                                \
  template void GemmStridedBatched<T>(int, bool, bool, int64_t, int64_t, int64_t, const T*, int64_t, int64_t, \
                                      const T*, int64_t, int64_t, float, T*, int64_t, int64_t, int64_t);
ANVIL_GEMM_INSTANCE(float)
ANVIL_GEMM_INSTANCE(double)
ANVIL_GEMM_INSTANCE(Half)
ANVIL_GEMM_INSTANCE(BFloat16)
#undef ANVIL_GEMM_INSTANCE

}  // namespace anvil::cuda
