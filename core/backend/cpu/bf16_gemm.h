// A bfloat16 GEMM with float32 accumulation, on AVX-512-BF16 (vdpbf16ps: 32 multiply-adds of
// bf16 pairs per instruction, twice the float32 FMA's 16), for autocast's matrix products on
// the CPU.
//
// Why its own: Debian 12's OpenBLAS (0.3.21) is built without its bfloat16 routines (the
// library exports no sbgemm), and oneDNN 2.6 offers bf16 products only as a matmul primitive
// built per shape, not as a GEMM call. It follows the float32 kernel (sgemm_avx512.h): k in
// chunks, B packed per chunk into 32-column panels of bf16 pairs (lane j of a zmm holds
// B(2q, j) and B(2q+1, j): the operand order vdpbf16ps wants),
// A packed into 12-row panels of pairs that the micro-kernel broadcasts, a 12 x 32 float32
// tile of C in 24 zmm accumulators.
//
// On CPUs with AMX (and the amx ISA level) products of at least a tile's worth take the AMX
// kernel instead (bf16_gemm_amx.h), under the same contract.
//
// Thread-safe; every call is single-threaded: callers split the rows over Anvil's pool.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace anvil::cpu {

// Whether bf16_gemm runs here: the CPU has AVX-512-BF16 and the active ISA level
// (core/backend/cpu/isa.h) is avx512 or above. Elsewhere bfloat16 products are widened to
// float32 and run on sgemm (correct, not faster).
bool bf16_gemm_available();

// The kernel bfloat16 products take here, for start lines and benchmark tables:
// "anvil-amx-bf16 (tdpbf16ps)", "anvil-avx512-bf16 (vdpbf16ps)" or "none (widened to float32)".
const char* bf16_gemm_kernel_name();

// C[i, j] = beta * C[i, j] + sum_p A(i, p) * B(p, j) for i < m, j < n, in float32, where
//   A(i, p) = a[i * a_rs + p * a_cs],  B(p, j) = b[p * b_rs + j * b_cs]   (bfloat16 bits)
//   C(i, j) = c[i * ldc + j]                                               (float32)
// beta is 0 (C is overwritten, never read) or 1. Requires bf16_gemm_available().
// Runs the candidate bf16_gemm_candidate_for(m, n, k) chooses; operands with no unit stride
// always take Anvil's kernel (oneDNN's matmul takes row- or column-major operands only).
void bf16_gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs, const uint16_t* b,
               int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc);

// The candidates for bf16 products: Anvil's kernels (AVX-512-BF16, or AMX tiles at the amx
// level) and oneDNN's bf16 matmul primitive (onednn_primitives.h). Like the float32 GEMM
// (gemm.h), the choice per shape follows an order of preference measured by bench/amp_bench.cc
// ("onednn" table; figures in bench/RESULTS.md). ANVIL_BF16_GEMM=anvil|onednn forces one for
// every shape (tests, benchmarks; it also decides bfloat16 convolution forward: conv_bf16.h);
// one that cannot run here is an error at the first bfloat16 product, saying why.
enum class Bf16GemmCandidate { kAnvil, kOneDnn };
std::string bf16_gemm_candidate_name(Bf16GemmCandidate c);  // "anvil", "onednn"
// Why `c` cannot run here ("" when it can).
std::string bf16_gemm_unavailable_reason(Bf16GemmCandidate c);
Bf16GemmCandidate bf16_gemm_candidate_for(int64_t m, int64_t n, int64_t k);
// The candidate ANVIL_BF16_GEMM forces (nullopt when unset); throws as described above.
std::optional<Bf16GemmCandidate> bf16_gemm_forced_candidate();
// Whether bf16_gemm runs this product on oneDNN: its candidate is oneDNN and every operand has
// a unit stride (callers that round the product themselves take oneDNN's bfloat16-destination
// call on the same condition: linalg.cc).
bool bf16_gemm_takes_onednn(int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs, int64_t b_rs, int64_t b_cs);
// bf16_gemm through one named candidate (tests and benchmarks compare them); throws when it
// cannot run here, or (oneDNN) when an operand has no unit stride.
void bf16_gemm_with(Bf16GemmCandidate candidate, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs,
                    int64_t a_cs, const uint16_t* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc);
// Anvil's own kernel, whatever the choice (the AMX kernel where amx_bf16_gemm_available()).
void anvil_bf16_gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs, const uint16_t* b,
                     int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc);

// out[i] = the float32 value of the bfloat16 bits in[i] (exact: a bfloat16 is a float32's high
// half), n values.
void bf16_to_float(const uint16_t* in, float* out, int64_t n);

// out[i] = BFloat16(in[i]).bits (nearest even, NaN kept quiet, denormals kept), n values;
// vectorised at the avx512 level.
void float_to_bf16(const float* in, uint16_t* out, int64_t n);

}  // namespace anvil::cpu
