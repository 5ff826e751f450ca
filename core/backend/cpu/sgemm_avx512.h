// A float32 GEMM with AVX-512 register tiles, for the convolution kernels.
//
// Why not OpenBLAS here: convolution wants operands OpenBLAS cannot take without a copy. Its
// B operand is "row p of B starts at b + b_offsets[p]", which lets a stride-1 convolution
// read the (padded) input image directly as an implicit column matrix, with no im2col
// buffer; and A may be any strided view (a transposed weight). On the plain layouts it runs
// at OpenBLAS's speed (~98% of it to ~115%; bench/RESULTS.md), so nothing is lost.
#pragma once

#include <cstdint>

namespace anvil::cpu {

// C[i, j] = beta * C[i, j] + sum_p A(i, p) * B(p, j) for i < m, j < n, where
//   A(i, p) = a[row(i) + p * a_col_stride], row(i) = a_row_offsets[i] when given (rows at
//             arbitrary offsets: an implicit column matrix), else i * a_row_stride
//   B(p, j) = b[b_offsets[p] + j]          (each row of B contiguous)
//   C(i, j) = c[i * ldc + j]
// beta is 0 (C is overwritten, never read) or 1. Single-threaded; callers split the work.
// Requires the avx512 ISA level (core/backend/cpu/isa.h).
void sgemm_avx512(int64_t m, int64_t n, int64_t k, const float* a, const int64_t* a_row_offsets, int64_t a_row_stride,
                  int64_t a_col_stride, const float* b, const int64_t* b_offsets, float beta, float* c, int64_t ldc);

}  // namespace anvil::cpu
