// cuBLASLt for the int8 products of the quantized layers (core/quant/quantized_layers.h):
// s8 x s8 -> s32, exact, in the one layout cuBLASLt's integer tensor-core kernels take with
// ordinary column-major matrices ("TN": A transposed, B not; leading dimensions multiples of
// 4, pointers 4-byte aligned; the heuristic's default alignment of 256 bytes is kept).
//
// The library is loaded with dlopen on first use, as cuBLAS is (blas.cc says why). The
// algorithm for each shape is asked of cuBLASLt's heuristic once and kept.
//
// Thread-safety: any thread may call; handles are per (thread, device), the algorithm cache is
// locked.
#pragma once

#include <cstdint>
#include <functional>

namespace anvil::cuda {

// Row-major on `device`'s current stream: c[m, n] = x[m, k] · w[n, k]ᵀ in int32, with x, w
// int8 and every row stride equal to its row length. Requires n and k multiples of 4 and
// 256-byte aligned pointers (what the heuristic assumes unless told otherwise; the device
// allocator's blocks are). False, with nothing launched, when cuBLASLt has no int8 algorithm
// for the shape on this device (the algorithm is asked of cuBLASLt's heuristic once per shape,
// then cached); errors of the library throw. `fill_x`, when given, is called once an
// algorithm is found and before the product is queued: it writes x, so no work is spent on
// operands a refused shape would not use.
bool int8_matmul_nt(int device, int64_t m, int64_t n, int64_t k, const int8_t* x, const int8_t* w, int32_t* c,
                    const std::function<void()>& fill_x = {});

}  // namespace anvil::cuda
