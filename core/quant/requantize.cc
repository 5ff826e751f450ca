// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own _mm512_undefined_* operands.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "core/quant/requantize.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "core/backend/cpu/isa.h"
#include "core/quant/int8_elements.h"

namespace anvil::quant {

namespace {
using element::Compensated;
}  // namespace

void requantize_to_float(const int32_t* acc, int64_t ld_acc, int64_t m, int64_t n, int32_t a_zero_point, float a_scale,
                         const GemmEpilogue& e, float* out, int64_t ld_out) {
  for (int64_t i = 0; i < m; ++i) {
    const int32_t* a = acc + i * ld_acc;
    float* o = out + i * ld_out;
    for (int64_t j = 0; j < n; ++j) {
      const int32_t raw = Compensated(a[j], a_zero_point, e.w_row_sums[j]);
      // fbgemm's vector path (requantizeForFloatAvx2): one multiplier a_scale * w_scale, then
      // a fused multiply-add with the bias.
      const float multiplier = a_scale * e.w_scales[e.per_channel ? j : 0];
      float v = e.bias != nullptr ? std::fma(static_cast<float>(raw), multiplier, e.bias[j])
                                  : static_cast<float>(raw) * multiplier;
      if (e.relu) v = std::max(v, 0.0f);
      o[j] = v;
    }
  }
}

RequantConstants requant_constants(float a_scale, const float* w_scales, bool per_channel, int64_t n, float out_scale) {
  RequantConstants k;
  const int64_t count = per_channel ? n : 1;
  k.act_times_w_scale.resize(static_cast<size_t>(count));
  k.multiplier.resize(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) {
    k.act_times_w_scale[static_cast<size_t>(j)] = a_scale * w_scales[j];
    k.multiplier[static_cast<size_t>(j)] = k.act_times_w_scale[static_cast<size_t>(j)] / out_scale;
  }
  return k;
}

namespace {

// One value of the uint8 epilogue (int8_elements.h, shared with the CUDA kernels).
inline uint8_t RequantizeOne(float v, const float* bias_term, float multiplier, int32_t out_zero_point, long lo) {
  return static_cast<uint8_t>(
      element::RequantizeToUint8(v, bias_term, multiplier, out_zero_point, static_cast<int32_t>(lo)));
}

// A column's bias in the accumulator's units: per tensor, fbgemm divides the bias by
// multiplying with the reciprocal; per channel it divides.
inline float BiasTerm(const GemmEpilogue& e, const RequantConstants& k, int64_t j, float reciprocal) {
  return e.per_channel ? e.bias[j] / k.act_times_w_scale[static_cast<size_t>(j)] : e.bias[j] * reciprocal;
}

#ifdef __AVX2__
// Eight values of RequantizeOne, with its operations in its order. lrintf's results past the
// clamp bounds are reproduced without 64-bit conversions: products are clamped to +-2^30 first
// (every value beyond clamps to the same end once the zero point is added), and those lrintf
// cannot convert (NaN, +-inf, |v| >= 2^63: it returns LONG_MIN) go to the lower bound, as
// LONG_MIN clamps there.
inline void RequantizeEightValues(__m256 v, const __m256* bias_term, __m256 multiplier, __m256i out_zp, __m256i lo,
                                  uint8_t* o) {
  if (bias_term != nullptr) v = _mm256_add_ps(v, *bias_term);
  v = _mm256_mul_ps(v, multiplier);
  const __m256 unconvertible = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v), _mm256_set1_ps(0x1p63f),
                                             _CMP_NLT_UQ);  // |v| >= 2^63 or NaN
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-0x1p30f)), _mm256_set1_ps(0x1p30f));
  __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(v), out_zp);
  q = _mm256_min_epi32(_mm256_max_epi32(q, lo), _mm256_set1_epi32(255));
  q = _mm256_blendv_epi8(q, lo, _mm256_castps_si256(unconvertible));
  const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(o), _mm_packus_epi16(words, words));
}

// Eight columns of requantize_to_uint8: the zero-point compensation in wrapping int32, then
// RequantizeEightValues.
inline void RequantizeEight(const int32_t* a, const int32_t* row_sums, __m256i a_zp, const float* bias_term,
                            const float* multiplier, __m256i out_zp, __m256i lo, uint8_t* o) {
  const __m256i raw =
      _mm256_sub_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)),
                       _mm256_mullo_epi32(a_zp, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row_sums))));
  const __m256 bias = bias_term != nullptr ? _mm256_loadu_ps(bias_term) : _mm256_setzero_ps();
  RequantizeEightValues(_mm256_cvtepi32_ps(raw), bias_term != nullptr ? &bias : nullptr, _mm256_loadu_ps(multiplier),
                        out_zp, lo, o);
}

#define ANVIL_REQUANT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

// RequantizeEightValues over sixteen lanes, the same operations in the same order: the bytes
// as int32 lanes in [lo, 255].
ANVIL_REQUANT_AVX512 inline __m512i RequantizeSixteen(__m512 v, const __m512* bias_term, __m512 multiplier,
                                                      __m512i out_zp, __m512i lo) {
  if (bias_term != nullptr) v = _mm512_add_ps(v, *bias_term);
  v = _mm512_mul_ps(v, multiplier);
  const __mmask16 unconvertible =
      _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(0x1p63f), _CMP_NLT_UQ);  // |v| >= 2^63 or NaN
  v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-0x1p30f)), _mm512_set1_ps(0x1p30f));
  __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), out_zp);
  q = _mm512_min_epi32(_mm512_max_epi32(q, lo), _mm512_set1_epi32(255));
  return _mm512_mask_blend_epi32(unconvertible, q, lo);
}

ANVIL_REQUANT_AVX512 inline void RequantizeSixteenValues(__m512 v, const __m512* bias_term, __m512 multiplier,
                                                         __m512i out_zp, __m512i lo, uint8_t* o) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(o),
                   _mm512_cvtepi32_epi8(RequantizeSixteen(v, bias_term, multiplier, out_zp, lo)));
}

// Where one row's vectors go: the bytes, or (Dequantized) the bytes dequantized as
// dequantize_uint8 does, float(q - out_zero_point) * out_scale, without storing them.
struct ToBytes {
  uint8_t* o;
  ANVIL_REQUANT_AVX512 void operator()(int64_t j, __m512i q) const {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + j), _mm512_cvtepi32_epi8(q));
  }
};
struct Dequantized {
  float* o;
  int32_t zp;
  float scale;
  ANVIL_REQUANT_AVX512 void operator()(int64_t j, __m512i q) const {
    _mm512_storeu_ps(
        o + j, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q, _mm512_set1_epi32(zp))), _mm512_set1_ps(scale)));
  }
};

// The vector part of one row of requantize_to_uint8 on AVX-512: columns [0, len) in steps of
// 16 while a whole vector fits; returns where it stopped. The column constants repeat every
// `period` (a multiple of 16, or the row's length).
template <typename Sink>
ANVIL_REQUANT_AVX512 int64_t RequantizeRowAvx512(const int32_t* a, int64_t len, int64_t period, const int32_t* row_sums,
                                                 int32_t a_zero_point, const float* bias, const float* multiplier,
                                                 int32_t out_zero_point, int32_t lo, const Sink& sink) {
  const __m512i a_zp = _mm512_set1_epi32(a_zero_point), out_zp = _mm512_set1_epi32(out_zero_point),
                vlo = _mm512_set1_epi32(lo);
  int64_t j = 0;
  for (int64_t t = 0; j + 16 <= len; j += 16) {
    const __m512i raw =
        _mm512_sub_epi32(_mm512_loadu_si512(a + j), _mm512_mullo_epi32(a_zp, _mm512_loadu_si512(row_sums + t)));
    const __m512 vbias = bias != nullptr ? _mm512_loadu_ps(bias + t) : _mm512_setzero_ps();
    sink(j, RequantizeSixteen(_mm512_cvtepi32_ps(raw), bias != nullptr ? &vbias : nullptr,
                              _mm512_loadu_ps(multiplier + t), out_zp, vlo));
    t += 16;
    if (t >= period) t -= period;
  }
  return j;
}

// requantize_planes_to_uint8's plane loop on AVX-512; returns where it stopped.
ANVIL_REQUANT_AVX512 int64_t RequantizePlaneAvx512(const float* a, int64_t plane, const float* bias, float multiplier,
                                                   int32_t out_zero_point, int32_t lo, uint8_t* o) {
  const __m512 vbias = _mm512_set1_ps(bias != nullptr ? *bias : 0.0f), vmultiplier = _mm512_set1_ps(multiplier);
  const __m512i out_zp = _mm512_set1_epi32(out_zero_point), vlo = _mm512_set1_epi32(lo);
  int64_t i = 0;
  for (; i + 16 <= plane; i += 16)
    RequantizeSixteenValues(_mm512_loadu_ps(a + i), bias != nullptr ? &vbias : nullptr, vmultiplier, out_zp, vlo,
                            o + i);
  return i;
}
#endif

}  // namespace

namespace {

// requantize_to_uint8's per-call tables: each column's row sum, bias term and multiplier, once
// per call rather than per element. A contiguous block whose rows are narrower than a vector,
// or end in a partial one (a convolution's few output channels), runs as one flat row: its
// column constants repeat every n elements, so tiled over 16 n they line up with every vector
// of 8 or 16.
struct Columns {
  bool flat;
  int64_t period, rows, len;
  std::vector<int32_t> row_sums;
  std::vector<float> bias_term, multiplier;
  const float* bias() const { return bias_term.empty() ? nullptr : bias_term.data(); }
};

Columns MakeColumns(int64_t ld_acc, int64_t ld_out, int64_t m, int64_t n, const GemmEpilogue& e,
                    const RequantConstants& k) {
  Columns c;
  c.flat = ld_acc == n && ld_out == n && n % 16 != 0 && n < 64 && m > 1;
  c.period = c.flat ? 16 * n : n;
  c.rows = c.flat ? 1 : m;
  c.len = c.flat ? m * n : n;
  const float reciprocal = 1.0f / k.act_times_w_scale[0];
  c.row_sums.resize(static_cast<size_t>(c.period));
  c.bias_term.resize(e.bias != nullptr ? static_cast<size_t>(c.period) : 0);
  c.multiplier.resize(static_cast<size_t>(c.period));
  for (int64_t t = 0; t < c.period; ++t) {
    const int64_t j = t % n;
    c.row_sums[static_cast<size_t>(t)] = e.w_row_sums[j];
    if (e.bias != nullptr) c.bias_term[static_cast<size_t>(t)] = BiasTerm(e, k, j, reciprocal);
    c.multiplier[static_cast<size_t>(t)] = k.multiplier[e.per_channel ? static_cast<size_t>(j) : 0];
  }
  return c;
}

// One element of requantize_to_uint8, column constants at t.
inline uint8_t RequantizeAt(int32_t acc, int32_t a_zero_point, const Columns& c, size_t t, int32_t out_zero_point,
                            long lo) {
  const int32_t raw = Compensated(acc, a_zero_point, c.row_sums[t]);
  return RequantizeOne(static_cast<float>(raw), c.bias() != nullptr ? c.bias() + t : nullptr, c.multiplier[t],
                       out_zero_point, lo);
}

}  // namespace

RequantColumns requant_columns(const GemmEpilogue& e, const RequantConstants& k, int64_t n) {
  Columns c = MakeColumns(n, n, 1, n, e, k);
  return RequantColumns{std::move(c.bias_term), std::move(c.multiplier)};
}

void requantize_to_uint8(const int32_t* acc, int64_t ld_acc, int64_t m, int64_t n, int32_t a_zero_point,
                         const GemmEpilogue& e, const RequantConstants& k, int32_t out_zero_point, uint8_t* out,
                         int64_t ld_out) {
  const long lo = e.relu ? out_zero_point : 0;
  const Columns c = MakeColumns(ld_acc, ld_out, m, n, e, k);
  const float* bias = c.bias();
  const int64_t period = c.period, len = c.len;
  [[maybe_unused]] const bool avx512 = cpu::isa_at_least(CpuIsa::kAvx512);
  for (int64_t i = 0; i < c.rows; ++i) {
    const int32_t* a = acc + i * ld_acc;
    uint8_t* o = out + i * ld_out;
    int64_t j = 0;
#ifdef __AVX2__
    if (avx512)
      j = RequantizeRowAvx512(a, len, period, c.row_sums.data(), a_zero_point, bias, c.multiplier.data(),
                              out_zero_point, static_cast<int32_t>(lo), ToBytes{o});
    const __m256i a_zp = _mm256_set1_epi32(a_zero_point), out_zp = _mm256_set1_epi32(out_zero_point),
                  vlo = _mm256_set1_epi32(static_cast<int32_t>(lo));
    // The column index is carried, not taken modulo the period per vector: a 64-bit division
    // per eight values took more time than the values' arithmetic.
    for (int64_t t = j % period; j + 8 <= len; j += 8) {
      RequantizeEight(a + j, c.row_sums.data() + t, a_zp, bias != nullptr ? bias + t : nullptr, c.multiplier.data() + t,
                      out_zp, vlo, o + j);
      t += 8;
      if (t >= period) t -= period;
    }
#endif
    for (; j < len; ++j)
      o[j] = RequantizeAt(a[j], a_zero_point, c, static_cast<size_t>(j % period), out_zero_point, lo);
  }
}

void requantize_to_dequantized_float(const int32_t* acc, int64_t ld_acc, int64_t m, int64_t n, int32_t a_zero_point,
                                     const GemmEpilogue& e, const RequantConstants& k, int32_t out_zero_point,
                                     float out_scale, float* out, int64_t ld_out) {
  const auto dequantize = [&](uint8_t q) { return element::DequantizeUint8(q, out_zero_point, out_scale); };
#ifdef __AVX2__
  if (cpu::isa_at_least(CpuIsa::kAvx512)) {
    const long lo = e.relu ? out_zero_point : 0;
    const Columns c = MakeColumns(ld_acc, ld_out, m, n, e, k);
    for (int64_t i = 0; i < c.rows; ++i) {
      const int32_t* a = acc + i * ld_acc;
      float* o = out + i * ld_out;
      int64_t j =
          RequantizeRowAvx512(a, c.len, c.period, c.row_sums.data(), a_zero_point, c.bias(), c.multiplier.data(),
                              out_zero_point, static_cast<int32_t>(lo), Dequantized{o, out_zero_point, out_scale});
      for (; j < c.len; ++j)
        o[j] = dequantize(RequantizeAt(a[j], a_zero_point, c, static_cast<size_t>(j % c.period), out_zero_point, lo));
    }
    return;
  }
#endif
  // Below AVX-512: the bytes, then dequantized.
  std::vector<uint8_t> q(static_cast<size_t>(m * n));
  requantize_to_uint8(acc, ld_acc, m, n, a_zero_point, e, k, out_zero_point, q.data(), n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) out[i * ld_out + j] = dequantize(q[static_cast<size_t>(i * n + j)]);
}

void requantize_planes_to_uint8(const float* acc, int64_t images, int64_t channels, int64_t plane,
                                const GemmEpilogue& e, const RequantConstants& k, int32_t out_zero_point,
                                uint8_t* out) {
  const long lo = e.relu ? out_zero_point : 0;
  const float reciprocal = 1.0f / k.act_times_w_scale[0];
  [[maybe_unused]] const bool avx512 = cpu::isa_at_least(CpuIsa::kAvx512);
  for (int64_t c = 0; c < channels; ++c) {
    const float bias_term = e.bias != nullptr ? BiasTerm(e, k, c, reciprocal) : 0.0f;
    const float* bias = e.bias != nullptr ? &bias_term : nullptr;
    const float multiplier = k.multiplier[e.per_channel ? static_cast<size_t>(c) : 0];
    for (int64_t n = 0; n < images; ++n) {
      const float* a = acc + (n * channels + c) * plane;
      uint8_t* o = out + (n * channels + c) * plane;
      int64_t i = 0;
#ifdef __AVX2__
      if (avx512) i = RequantizePlaneAvx512(a, plane, bias, multiplier, out_zero_point, static_cast<int32_t>(lo), o);
      const __m256 vbias = _mm256_set1_ps(bias_term), vmultiplier = _mm256_set1_ps(multiplier);
      const __m256i out_zp = _mm256_set1_epi32(out_zero_point), vlo = _mm256_set1_epi32(static_cast<int32_t>(lo));
      for (; i + 8 <= plane; i += 8) {
        RequantizeEightValues(_mm256_loadu_ps(a + i), bias != nullptr ? &vbias : nullptr, vmultiplier, out_zp, vlo,
                              o + i);
      }
#endif
      for (; i < plane; ++i) o[i] = RequantizeOne(a[i], bias, multiplier, out_zero_point, lo);
    }
  }
}

}  // namespace anvil::quant
