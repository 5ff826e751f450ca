// One checking macro for every CUDA runtime and cuBLAS call: a failure becomes an
// anvil::Error that names the call, its file:line and the library's own message, so a
// kernel fault or a lost device fails the job with a reason instead of aborting the server.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace anvil::cuda {

[[noreturn]] void ThrowCudaError(cudaError_t error, const char* expr, const char* file, int line);
[[noreturn]] void ThrowCublasError(cublasStatus_t status, const char* expr, const char* file, int line);

}  // namespace anvil::cuda

#define ANVIL_CUDA_CHECK(expr)                                                     \
  do {                                                                             \
    const cudaError_t anvil_cuda_error_ = (expr);                                  \
    if (anvil_cuda_error_ != cudaSuccess) {                                        \
      ::anvil::cuda::ThrowCudaError(anvil_cuda_error_, #expr, __FILE__, __LINE__); \
    }                                                                              \
  } while (0)

#define ANVIL_CUBLAS_CHECK(expr)                                                        \
  do {                                                                                  \
    const cublasStatus_t anvil_cublas_status_ = (expr);                                 \
    if (anvil_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                \
      ::anvil::cuda::ThrowCublasError(anvil_cublas_status_, #expr, __FILE__, __LINE__); \
    }                                                                                   \
  } while (0)

// After every kernel launch: a bad configuration is reported at the launch, not at some
// later unrelated call.
#define ANVIL_CUDA_KERNEL_LAUNCH_CHECK() ANVIL_CUDA_CHECK(cudaGetLastError())
