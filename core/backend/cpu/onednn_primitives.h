// oneDNN's bfloat16 and int8 primitives (matmul, convolution forward), reached through its C
// API at run time: candidates beside Anvil's own bf16 and int8 kernels (bf16_gemm.h,
// int8_gemm.h), chosen per shape where they measured faster (docs/cpu.md, "oneDNN primitives").
//
// Why oneDNN: on CPUs with AMX (Sapphire Rapids and later) Debian 12's oneDNN 2.6.3
// dispatches AMX-BF16 and AMX-INT8 kernels by default, which is how PyTorch reaches its AMX
// speed: a primitive built once per shape and kept.
//
// Loading: libdnnl.so.2 is dlopened by blas_library.cc (no link-time dependency; its ISA cap
// follows Anvil's active level), and the primitive API is looked up from that handle here. The
// few C types and enum values used are declared in onednn_primitives.cc from oneDNN 2.x's
// oneapi/dnnl/dnnl_types.h and dnnl.h rather than taken from libdnnl-dev: the build then needs
// nothing of oneDNN (like the float32 candidates, it is a run-time option only), and no struct
// layout is copied, since the descriptors are opaque buffers filled and read only by the
// library. Without the library (or without one of these functions, as in oneDNN 3.x, whose
// descriptor API is gone) available() is false with the reason, and callers keep Anvil's
// kernels. The calls a 3.x port changes are gathered in onednn_primitives.cc (Attr, Build).
//
// Each call runs single-threaded on the calling thread, as the other kernels do (callers split
// the work over Anvil's pool): oneDNN's OpenMP is held at one thread while a primitive is built
// and while it runs. The exception is bf16_matmul_rounded, which is built for and runs on the
// number of threads its caller gives.
//
// The primitive cache: each primitive is built once per key (the operation, its shape, its
// operands' strides, beta, bias) and kept in one process-wide cache of at most kPrimitiveCacheCapacity
// entries, the least recently used dropped first. Thread-safe: the cache is guarded by a mutex
// (a primitive is built while it is held, so threads asking for the same new shape build it
// once); an entry is shared (reference-counted) with the calls running it, so dropping it never
// pulls a primitive from under a running call; primitives run concurrently, each call with its
// own scratchpad (a per-thread buffer: the primitives use oneDNN's user-scratchpad mode) and its
// own memory objects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace anvil::cpu::onednn {

// Whether the primitives can be built here: libdnnl.so.2 loaded, with the functions used.
// `why` (if given) receives the reason when not.
bool available(std::string* why = nullptr);
// "oneDNN 2.6.3".
std::string version();

// Whether the bf16 primitives may run here: available(), and bf16_gemm_available() (the
// avx512 level with AVX-512-BF16: below it bfloat16 products are widened to float32
// everywhere). The reason when not.
bool bf16_available(std::string* why = nullptr);
// Whether the int8 matmul may run here: available(), and the CPU has AVX512-VNNI at the avx512
// level (or the amx level is active). Below VNNI oneDNN multiplies u8 by s8 with vpmaddubsw,
// whose 16-bit sums saturate, so its results would not be exact. The reason when not.
bool int8_available(std::string* why = nullptr);

// bf16_gemm's contract (bf16_gemm.h) on oneDNN's bf16 x bf16 -> f32 matmul:
//   C(i, j) = beta * C(i, j) + sum_p A(i, p) B(p, j), A(i, p) = a[i * a_rs + p * a_cs],
//   B(p, j) = b[p * b_rs + j * b_cs], C(i, j) = c[i * ldc + j]; beta 0 or 1 (the sum post-op).
// Each operand must be row- or column-major (a stride of 1): bf16_matmul_supported says so.
// Throws anvil::Error when bf16_available() is false or the strides are not supported.
bool bf16_matmul_supported(int64_t a_rs, int64_t a_cs, int64_t b_rs, int64_t b_cs);
void bf16_matmul(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs, const uint16_t* b,
                 int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc);

// C(i, j) = bf16(relu?(sum_p A(i, p) B(p, j) + bias[j])) on oneDNN's bf16 matmul with a
// bfloat16 destination: A and B as in bf16_matmul, bias float32 [n] (null: none), C bfloat16
// bits with row stride ldc; one rounding per output, after the bias and relu (in float32).
// Unlike every other call here it runs on `threads` OpenMP threads, the product split by
// oneDNN itself, so B is packed once rather than once per row block; callers use it for
// large products outside Anvil's parallel regions, where the pool's threads are idle. The
// rounding is oneDNN's (vcvtneps2bf16: nearest even, float32 denormal results flushed to
// zero, as in PyTorch's CPU bfloat16 products, which run on this same primitive).
void bf16_matmul_rounded(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs,
                         const uint16_t* b, int64_t b_rs, int64_t b_cs, const float* bias, bool relu, uint16_t* c,
                         int64_t ldc, int threads);

// C[i, j] = sum_p A[i, p] W[j, p] exactly, in int32, for i < m, j < n: A [m, k] uint8 with row
// stride lda, W [n, k] int8 with row stride ldw (a Linear's weight as it is stored), C with row
// stride ldc (written, never read). No scales or zero points: the primitive computes only the
// integer sums and the caller's epilogue requantizes (oneDNN 2.6 answers run-time output
// scales with a slow reference path). Throws anvil::Error when int8_available() is false.
void int8_matmul(int64_t m, int64_t n, int64_t k, const uint8_t* a, int64_t lda, const int8_t* w, int64_t ldw,
                 int32_t* c, int64_t ldc);

// A 2-d convolution's geometry, NCHW, PyTorch's arguments (dilation as PyTorch counts it: 1 is
// dense).
struct Conv2dGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input
  int64_t oc = 0, kh = 0, kw = 0;      // weight [oc, c / groups, kh, kw]
  int64_t groups = 1;
  int64_t stride_h = 1, stride_w = 1, pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t oh = 0, ow = 0;  // output
};

// y = conv2d(x, w) + bias on oneDNN's bf16 convolution forward: x [n, c, h, w], w, bias [oc]
// (null: none) and y [n, oc, oh, ow], all bfloat16 bits, contiguous; accumulated in float32,
// bias added before the one rounding to bfloat16. The primitive runs on the layouts oneDNN
// chooses (blocked: on plain NCHW oneDNN 2.6 falls back to its im2col + GEMM, 2-8x slower);
// x and w are reordered into them and y back, within the call, through per-thread buffers.
// Throws anvil::Error when bf16_available() is false or oneDNN has no implementation for the
// geometry.
void bf16_conv2d_forward(const Conv2dGeometry& g, const uint16_t* x, const uint16_t* w, const uint16_t* bias,
                         uint16_t* y);

// The implementation oneDNN chose for a primitive (its impl_info_str: "brg:avx512_core_bf16",
// "gemm:jit", "ref:any", ...), building it if it is not cached: for benchmark tables, and to
// catch a slow reference path.
std::string bf16_matmul_impl(int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs, int64_t b_rs, int64_t b_cs,
                             int64_t ldc, float beta);
std::string bf16_matmul_rounded_impl(int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs, int64_t b_rs,
                                     int64_t b_cs, int64_t ldc, bool bias, bool relu, int threads);
std::string int8_matmul_impl(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldw, int64_t ldc);
std::string bf16_conv2d_impl(const Conv2dGeometry& g, bool bias);

inline constexpr size_t kPrimitiveCacheCapacity = 256;

struct PrimitiveCacheStats {
  int64_t built = 0;    // primitives built since the process started (each a cache miss)
  int64_t hits = 0;     // calls that found their primitive cached
  int64_t evicted = 0;  // entries dropped to stay within the capacity
  size_t size = 0;      // entries now
};
PrimitiveCacheStats primitive_cache_stats();

}  // namespace anvil::cpu::onednn
