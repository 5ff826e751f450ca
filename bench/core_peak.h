// One core's arithmetic peak, measured: independent chains of float32 FMAs (vfmadd231ps) and of
// bfloat16 pair dots (vdpbf16ps) on registers, no memory. A GEMM's GFLOP/s means little alone
// on a VM whose clock is not stated; as a fraction of this peak it says how much of the
// core the kernel uses, and the ratio of the two peaks bounds what a bfloat16 kernel can gain
// over a float32 one on this CPU.
#pragma once

// GCC 12's AVX-512 headers build vectors from undefined ones (see bf16_gemm.cc); the warning
// comes where they are inlined, so it is off for this whole header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <chrono>

#include "core/util/cpu_features.h"

namespace anvil::bench {

struct CorePeak {
  double fp32_fma = 0;  // GFLOP/s, 0 where the CPU has no AVX-512F
  double bf16_dot = 0;  // GFLOP/s, 0 where the CPU has no AVX-512-BF16
};

namespace peak_detail {

constexpr int kChains = 12;  // more than latency x throughput of either instruction
constexpr long kIters = 20'000'000;

template <typename Step>
double BestGflops(double flop_per_iter, Step step) {
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flop_per_iter * kIters / s / 1e9);
  }
  return best;
}

// kChains independent chains of float32 FMAs (kBf16 false) or of bfloat16 pair dots. The
// target names both instruction sets; the FMA instance contains no bfloat16 instruction, so it
// runs on any AVX-512F core.
template <bool kBf16>
__attribute__((target("avx512f,fma,avx512bf16"), noinline)) float Chains() {
  __m512 acc[kChains];
#pragma GCC unroll 12
  for (auto& x : acc) {
    x = _mm512_setzero_ps();
    asm volatile("" : "+v"(x));  // opaque starts: identical chains would be merged into one
  }
  __m512 a = _mm512_set1_ps(1.0001f);
  const __m512 b = _mm512_set1_ps(1e-9f);
  for (long it = 0; it < kIters; ++it) {
#pragma GCC unroll 12
    for (auto& x : acc) {
      if constexpr (kBf16) {
        x = _mm512_dpbf16_ps(x, (__m512bh)a, (__m512bh)b);
      } else {
        x = _mm512_fmadd_ps(a, b, x);
      }
    }
    asm volatile("" : "+v"(a));  // keeps the loop from being folded
  }
  float sum = 0;
  for (const auto& x : acc) sum += _mm512_reduce_add_ps(x);
  return sum;
}

}  // namespace peak_detail

// About 0.3 s on an AVX-512 core; call once, on the thread the kernels will run on.
inline CorePeak MeasureCorePeak() {
  CorePeak p;
  const CpuFeatures& f = cpu_features();
  volatile float sink = 0;
  if (f.avx512f) {
    p.fp32_fma =
        peak_detail::BestGflops(peak_detail::kChains * 32.0, [&] { sink = sink + peak_detail::Chains<false>(); });
  }
  if (f.avx512f && f.avx512_bf16) {
    p.bf16_dot =
        peak_detail::BestGflops(peak_detail::kChains * 64.0, [&] { sink = sink + peak_detail::Chains<true>(); });
  }
  return p;
}

}  // namespace anvil::bench

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
