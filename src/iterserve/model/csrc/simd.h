// AVX-512 helpers shared by the extension's sources (paged_decode.cpp,
// fused_ops.cpp, amx_chunk.h): float32 lanes from float/bf16/half rows, tail masks,
// e^x, sixteen horizontal reductions at once.
#pragma once

#ifdef __AVX512F__
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <immintrin.h>

#include <cstdint>

namespace iterserve_simd {

// 16 float32 lanes from a float/bf16/half row (the build uses -march=native).
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const c10::BFloat16* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline __m512 load16(const c10::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// The same with only the lanes under `mask` read (the others 0).
inline __m512 load16(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }
inline __m512 load16(const c10::BFloat16* p, __mmask16 mask) {
  const __m256i raw = _mm256_maskz_loadu_epi16(mask, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline __m512 load16(const c10::Half* p, __mmask16 mask) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));
}

// 32 bf16 as two float32 vectors, no lane shuffle: the even elements
// (p[0], p[2], .., p[30]) and the odd ones (p[1], .., p[31]).
inline void load_even_odd(const c10::BFloat16* p, __m512& even, __m512& odd) {
  const __m512i raw = _mm512_loadu_si512(p);
  even = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
  odd = _mm512_castsi512_ps(_mm512_and_si512(raw, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// The first min(left, 16) lanes.
inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

// e^x (Cephes expf: range reduction by ln 2, degree-6 polynomial, scale by
// 2^n), within a few float32 ulp; exactly 0 below -87 (and for -inf, a hidden
// key), inf above ~88.7.
inline __m512 exp16(__m512 x) {
  const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(89.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(p, n));
}

inline __m512 max_ps(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
inline __m512 add_ps(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }

// Lane j of the result = Op over the lanes of v[j] (Op: max_ps or add_ps):
// sixteen horizontal reductions in about 30 instructions.
template <__m512 (*Op)(__m512, __m512)>
__attribute__((always_inline)) inline __m512 reduce16(const __m512* v) {
  __m512 pairs[8], quads[4];
  for (int k = 0; k < 8; ++k)
    pairs[k] = Op(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                  _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
  for (int k = 0; k < 4; ++k) {
    const __m512d a = _mm512_castps_pd(pairs[2 * k]), b = _mm512_castps_pd(pairs[2 * k + 1]);
    quads[k] = Op(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                  _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // quads[k], 128-bit lane L, element e: lane-L part of the reduction of v[4k + e]
  const __m512 low = Op(_mm512_shuffle_f32x4(quads[0], quads[1], 0x88),
                        _mm512_shuffle_f32x4(quads[0], quads[1], 0xDD));
  const __m512 high = Op(_mm512_shuffle_f32x4(quads[2], quads[3], 0x88),
                         _mm512_shuffle_f32x4(quads[2], quads[3], 0xDD));
  return Op(_mm512_shuffle_f32x4(low, high, 0x88), _mm512_shuffle_f32x4(low, high, 0xDD));
}

}  // namespace iterserve_simd
#endif
