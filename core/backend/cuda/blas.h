// cuBLAS for the CUDA kernels: one handle per (thread, device), bound to the thread's current
// stream at each call, and a row-major GEMM on top of cuBLAS's column-major one.
//
// TF32: float32 products use full float32 multiplies unless allow_tf32(true) (PyTorch's
// torch.backends.cuda.matmul.allow_tf32, off by default here too: parity with the CPU first).
// 16-bit floats accumulate in float32 (CUBLAS_COMPUTE_32F).
#pragma once

#include <cublas_v2.h>
#include <dlfcn.h>

#include <cstdint>
#include <string>

#include "core/tensor/dtype.h"
#include "core/util/error.h"

namespace anvil::cuda {

// The cuBLAS entry points Anvil calls, from the library loaded at first use.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  // The 32-bit-size overloads (the C symbols).
  cublasStatus_t (*gemm_strided_batched)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                         const void*, const void*, cudaDataType, int, long long, const void*,
                                         cudaDataType, int, long long, const void*, void*, cudaDataType, int, long long,
                                         int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
                         cudaDataType, int, const void*, cudaDataType, int, const void*, void*, cudaDataType, int,
                         cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};
// Loads cuBLAS on first use; throws with the loader's message when it cannot.
const CublasApi& cublas();

// dlopen of a CUDA library by its soname ("libcublasLt.so.13"): the loader's search path, then
// the toolkit's folder this build found, then /usr/local/cuda/lib64; RTLD_LOCAL. Throws naming
// the library and `purpose` when none has it.
void* open_cuda_library(const std::string& soname, const char* purpose);

// The symbol `name` of a library open_cuda_library opened, as `fn`'s type; throws when absent.
template <typename Fn>
void bind_cuda_symbol(void* library, const std::string& soname, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  ANVIL_CHECK(fn != nullptr, soname, " lacks ", name);
}

void set_allow_tf32(bool allow);
bool allow_tf32();

// The calling thread's handle for `device`, set to the device's current stream.
cublasHandle_t blas_handle(int device);

// Row-major, strided-batched: for each i < batch,
//   C_i[m, n] = op(A_i)[m, k] · op(B_i)[k, n] + beta · C_i
// where op(X) = X (stored [rows, cols] with leading dimension ld) or Xᵀ (stored transposed).
// T: float, double, Half, BFloat16. Strides in elements; ld >= 1.
template <typename T>
void GemmStridedBatched(int device, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a,
                        int64_t lda, int64_t stride_a, const T* b, int64_t ldb, int64_t stride_b, float beta, T* c,
                        int64_t ldc, int64_t stride_c, int64_t batch);

}  // namespace anvil::cuda
