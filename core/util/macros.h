// Portability macros shared by the CPU and CUDA backends.
#pragma once

#if defined(__CUDACC__)
#define ANVIL_HOST_DEVICE __host__ __device__
#define ANVIL_INLINE __host__ __device__ __forceinline__
#else
#define ANVIL_HOST_DEVICE
#define ANVIL_INLINE inline __attribute__((always_inline))
#endif
