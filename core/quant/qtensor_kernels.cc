// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own _mm512_undefined_* operands.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "core/quant/qtensor_kernels.h"

#include <algorithm>
#include <cmath>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "core/backend/cpu/isa.h"
#include "core/quant/int8_elements.h"

namespace anvil::quant {
namespace {

#ifdef __AVX2__
// Eight values already integral and in [0, 255] (as floats) stored as bytes.
inline void StoreBytes(__m256 v, uint8_t* out) {
  const __m256i i = _mm256_cvttps_epi32(v);
  const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(words, words));
}

// The scalar formulas' clamp, `v >= 0 ? min(v, 255) : 0`, lane by lane (NaN fails v >= 0 and
// becomes 0).
inline __m256 ClampToByteRange(__m256 v) {
  const __m256 non_negative = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GE_OQ);
  return _mm256_and_ps(non_negative, _mm256_min_ps(v, _mm256_set1_ps(255.0f)));
}

// The loops below over sixteen lanes where the CPU has AVX-512: each returns where it stopped,
// and the eight-lane loop and the scalar one finish the run. Same operations, same order.
#define ANVIL_QUANT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

ANVIL_QUANT_AVX512 inline void StoreBytes16(__m512 v, uint8_t* out) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v)));
}

ANVIL_QUANT_AVX512 inline __m512 ClampToByteRange16(__m512 v) {
  const __mmask16 non_negative = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_maskz_min_ps(non_negative, v, _mm512_set1_ps(255.0f));
}

ANVIL_QUANT_AVX512 int64_t QuantizeAvx512(const float* x, int64_t n, float inv, float zp, uint8_t* out) {
  const __m512 vinv = _mm512_set1_ps(inv), vzp = _mm512_set1_ps(zp);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), vinv),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    StoreBytes16(ClampToByteRange16(_mm512_add_ps(vzp, r)), out + i);
  }
  return i;
}

ANVIL_QUANT_AVX512 int64_t QuantizeFmaAvx512(const float* x, int64_t n, float inv, float zp, uint8_t* out) {
  const __m512 vinv = _mm512_set1_ps(inv), vzp = _mm512_set1_ps(zp);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = ClampToByteRange16(_mm512_fmadd_ps(_mm512_loadu_ps(x + i), vinv, vzp));
    StoreBytes16(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), out + i);
  }
  return i;
}

ANVIL_QUANT_AVX512 int64_t DequantizeAvx512(const uint8_t* q, int64_t n, float s, int32_t zp, float* out) {
  const __m512i vzp = _mm512_set1_epi32(zp);
  const __m512 vs = _mm512_set1_ps(s);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i)));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(bytes, vzp)), vs));
  }
  return i;
}
#endif

}  // namespace

// The vector loops compute each element with the scalar loop's operations, in the same order
// and rounding (multiply, round half to even in the default rounding mode, add, clamp), so
// both give the same bytes; the scalar loop finishes the tail.

void quantize_to_uint8(const float* x, int64_t n, double scale, int64_t zero_point, uint8_t* out) {
  const float inv = 1.0f / static_cast<float>(scale);
  const float zp = static_cast<float>(zero_point);
  int64_t i = 0;
#ifdef __AVX2__
  if (cpu::isa_at_least(CpuIsa::kAvx512)) i = QuantizeAvx512(x, n, inv, zp, out);
  const __m256 vinv = _mm256_set1_ps(inv), vzp = _mm256_set1_ps(zp);
  for (; i + 8 <= n; i += 8) {
    const __m256 r =
        _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    StoreBytes(ClampToByteRange(_mm256_add_ps(vzp, r)), out + i);
  }
#endif
  for (; i < n; ++i) out[i] = element::QuantizeToUint8(x[i], inv, zp);
}

void quantize_to_uint8_fma(const float* x, int64_t n, double scale, int64_t zero_point, uint8_t* out) {
  const float inv = 1.0f / static_cast<float>(scale);
  const float zp = static_cast<float>(zero_point);
  int64_t i = 0;
#ifdef __AVX2__
  if (cpu::isa_at_least(CpuIsa::kAvx512)) i = QuantizeFmaAvx512(x, n, inv, zp, out);
  const __m256 vinv = _mm256_set1_ps(inv), vzp = _mm256_set1_ps(zp);
  for (; i + 8 <= n; i += 8) {
    const __m256 v = ClampToByteRange(_mm256_fmadd_ps(_mm256_loadu_ps(x + i), vinv, vzp));
    StoreBytes(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), out + i);
  }
#endif
  for (; i < n; ++i) {
    float v = std::fma(x[i], inv, zp);
    v = v >= 0.0f ? std::min(v, 255.0f) : 0.0f;
    out[i] = static_cast<uint8_t>(std::nearbyint(v));
  }
}

OnnxDynamicQParams onnx_dynamic_qparams(float lo, float hi) {
  lo = std::min(lo, 0.0f);
  hi = std::max(hi, 0.0f);
  const float range = (hi - lo) / 255.0f;
  const float scale = range == 0.0f ? 1.0f : range;
  return {scale, std::clamp(std::nearbyint(-lo / scale), 0.0f, 255.0f)};
}

void quantize_to_uint8_divide(const float* x, int64_t n, float scale, float zero_point, uint8_t* out) {
  // One loop the compiler vectorises (division and rounding are lane-wise); the clamp is the
  // scalar formulas' (NaN fails v >= 0 and becomes 0).
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::nearbyint(x[i] / scale) + zero_point;
    out[i] = static_cast<uint8_t>(v >= 0.0f ? std::min(v, 255.0f) : 0.0f);
  }
}

void dequantize_uint8(const uint8_t* q, int64_t n, double scale, int64_t zero_point, float* out) {
  const float s = static_cast<float>(scale);
  const int32_t zp = static_cast<int32_t>(zero_point);
  int64_t i = 0;
#ifdef __AVX2__
  if (cpu::isa_at_least(CpuIsa::kAvx512)) i = DequantizeAvx512(q, n, s, zp, out);
  const __m256i vzp = _mm256_set1_epi32(zp);
  const __m256 vs = _mm256_set1_ps(s);
  for (; i + 8 <= n; i += 8) {
    const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(bytes, vzp)), vs));
  }
#endif
  for (; i < n; ++i) out[i] = static_cast<float>(static_cast<int32_t>(q[i]) - zp) * s;
}

}  // namespace anvil::quant
