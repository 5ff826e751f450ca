// The int8 matrix product of quantized layers: unsigned 8-bit activations times signed 8-bit
// weights, accumulated exactly in int32 (what fbgemm and oneDNN compute for PyTorch's
// quantized Linear and Conv2d). Zero points and scales are the caller's (core/quant/
// requantize.h): the kernels compute only the integer sums, so every kernel gives the same
// bits and each is checked against the scalar reference bit for bit.
//
// Kernels, chosen by the active ISA level (core/backend/cpu/isa.h):
//   reference    plain C++, the definition;
//   avx2         u8 and s8 widened to 16 bits, vpmaddwd (exact: vpmaddubsw's 16-bit
//                saturation is never used, so no reduce_range is needed for exactness);
//   avx512-vnni  vpdpbusd: four u8 x s8 products summed into each int32 lane;
//   amx          tdpbusd on AMX-INT8 tiles, for products of 16 rows or more; its weights
//                are packed in the VNNI layout, so smaller products (a batch of a few rows)
//                take vpdpbusd on the same packed weights.
// selected_int8_gemm() takes the first available of amx, avx512-vnni (the avx512 level and
// AVX512-VNNI), avx2 and reference; ANVIL_CPU_ISA or ScopedIsa lowers it. Layouts and kernel
// entry points: int8_gemm_kernels.h.
// The weights are packed once per layer for the kernel that will run them
// (PackedInt8Weight), with their row sums, which the zero-point compensation needs; a packed
// weight runs its kernel whatever the level later (packing checked that the CPU has it), the
// AMX tiles only while the amx level is active.
//
// Thread-safe: packed weights are immutable; every int8_gemm call is single-threaded (callers
// split rows or column blocks over Anvil's pool).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace anvil::cpu {

enum class Int8GemmKernel { kReference, kAvx2, kAvx512Vnni, kAmx };

// The kernel int8 products take now (follows the active ISA level), its name for start lines
// and benchmark tables ("anvil-avx512-vnni (vpdpbusd)"), and the kernels this CPU can run.
Int8GemmKernel selected_int8_gemm();
std::string int8_gemm_kernel_name(Int8GemmKernel kernel);
std::vector<Int8GemmKernel> available_int8_gemm_kernels();
// Why `kernel` cannot run at the active level ("" when it can): "no AVX512-VNNI on this CPU",
// "the active ISA level is avx2, below avx512", the AMX probe's or self-check's reason.
std::string int8_gemm_unavailable_reason(Int8GemmKernel kernel);

// The candidates for int8 products beside Anvil's kernels: oneDNN's u8 x s8 -> s32 matmul
// primitive (onednn_primitives.h; exact where it runs: AVX512-VNNI or AMX). int8_gemm and
// int8_gemm_columns take it per shape where it measured faster (bench/int8_bench.cc, figures in
// bench/RESULTS.md), for weights packed for any kernel but the reference (which stays the
// definition); it reads the weight's original matrix (PackedInt8Weight::weight()).
// ANVIL_INT8_GEMM=anvil|onednn forces one for every shape (tests, benchmarks); one that cannot
// run here is an error at the first int8 product, saying why.
enum class Int8GemmCandidate { kAnvil, kOneDnn };
std::string int8_gemm_candidate_name(Int8GemmCandidate c);                // "anvil", "onednn"
std::string int8_gemm_candidate_unavailable_reason(Int8GemmCandidate c);  // "" when it can run
// The candidate for a product of m rows, n columns of W and inner dimension k.
Int8GemmCandidate int8_gemm_candidate_for(int64_t m, int64_t n, int64_t k);

// The largest inner dimension: int32 sums of k products of at most 255 * 128 stay exact.
inline constexpr int64_t kMaxInt8GemmK = 65536;

// An int8 weight matrix W [n, k] (a Linear's [out_features, in_features], a convolution's
// [out_channels, in_channels * kh * kw]) in the layout one kernel reads.
class PackedInt8Weight {
 public:
  PackedInt8Weight() = default;
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  Int8GemmKernel kernel() const { return kernel_; }
  // sum_p W[j, p] for each row j of W: the zero-point compensation's term
  // (a_zero_point * row_sums[j]).
  const std::vector<int32_t>& row_sums() const { return row_sums_; }
  // The original matrix, [n, k] row-major (for serialising and export).
  const std::vector<int8_t>& weight() const { return weight_; }
  // The kernel's layout (opaque; empty for the reference kernel, which reads weight()).
  const int8_t* packed() const { return packed_.get(); }
  size_t packed_bytes() const { return packed_bytes_; }

 private:
  friend PackedInt8Weight pack_int8_weight(const int8_t* w, int64_t n, int64_t k, int64_t ldw, Int8GemmKernel kernel);
  int64_t n_ = 0, k_ = 0;
  Int8GemmKernel kernel_ = Int8GemmKernel::kReference;
  std::vector<int32_t> row_sums_;
  std::vector<int8_t> weight_;
  std::shared_ptr<int8_t[]> packed_;
  size_t packed_bytes_ = 0;
};

// Packs W (row j at w + j * ldw) for `kernel`. Throws anvil::Error when the kernel cannot run
// here or k exceeds kMaxInt8GemmK.
PackedInt8Weight pack_int8_weight(const int8_t* w, int64_t n, int64_t k, int64_t ldw,
                                  Int8GemmKernel kernel = selected_int8_gemm());

// C[i, j] = sum_p A[i, p] * W[j, p] for i < m, j < n, exactly, in int32; A [m, k] uint8 with
// row stride lda, C with row stride ldc (written, never read). Runs the kernel W was packed
// for. Single-threaded.
void int8_gemm(int64_t m, const uint8_t* a, int64_t lda, const PackedInt8Weight& w, int32_t* c, int64_t ldc);

// The same over columns [j0, j1) of W only (C's columns j0..j1-1 written): callers that split
// a small batch over the pool split here. j0 and j1 multiples of 16, or j1 == n.
void int8_gemm_columns(int64_t m, const uint8_t* a, int64_t lda, const PackedInt8Weight& w, int64_t j0, int64_t j1,
                       int32_t* c, int64_t ldc);

// The rows W's kernel takes per block of A (its packed A stays in L2 while all of W passes
// under it once). A caller that runs its own passes around the product block by block
// (quantize the rows, multiply, requantize: core/quant/quantized_layers.cc) hands int8_gemm
// this many rows at a time: W is then streamed no more often than in one call over every row,
// and the block's bytes and sums are still in L2 for the passes after it.
int64_t int8_gemm_rows_per_block(const PackedInt8Weight& w);

// The AMX kernel on tiles emulated in scalar code, from the instruction set reference (slow:
// for testing the AMX kernel's packing, blocking and edges on CPUs without AMX). W packed for
// kAvx512Vnni or kAmx (one layout); the same contract as int8_gemm_columns.
void int8_gemm_amx_emulated(int64_t m, const uint8_t* a, int64_t lda, const PackedInt8Weight& w, int64_t j0, int64_t j1,
                            int32_t* c, int64_t ldc);

}  // namespace anvil::cpu
