// Multi-row chunks of bf16 heads on the AMX tile unit (paged_decode.cpp's
// path for a chunk tile: rows > 1, head_dim a multiple of 32, up to 256).
//
// One call attends up to kMaxQueries query vectors (rows x G heads of one kv
// head, query q = row q / G, head q % G) against keys [lo, hi) of one
// segment, flash-attention style and query-major throughout:
//   per span of up to kSpan keys: pack the span's K rows into B tiles
//   (dimension pairs x keys, i.e. K^T in pair-interleaved order) and its V
//   rows into B tiles (key pairs x dimensions); then per block of 16 queries
//   that sees a key of the span: S[16, span] = Q . K^T (float32 sums of exact
//   bf16 products), scale, hide invisible keys (-inf), one streaming-softmax
//   step per query row (running max, sum, accumulator rescale), the weights
//   rounded to bf16, and acc[16, D] += P . V on the tile unit.
// The output is acc / sum per query. Packing is per task and span, so a task
// covers many rows (kMaxQueries / G) to share each packed span.
// Tiles (the TileConfig of amx_score.h: five 16-row x 64-byte tiles):
// S: tmm0, tmm1 = two S blocks, tmm2 = Q block, tmm3, tmm4 = K^T; P . V: tmm0,
// tmm1 = two acc blocks, tmm3 = P block, tmm2, tmm4 = V.
#pragma once

#include "amx_score.h"

#ifdef ITERSERVE_HAS_AMX
#include "simd.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace iterserve_amx_chunk {

using iterserve_simd::add_ps;
using iterserve_simd::max_ps;
using iterserve_simd::reduce16;

using c10::BFloat16;

constexpr int64_t kMaxQueries = 256;  // query vectors per call (rows x G)
constexpr int64_t kSpan = 128;        // keys per packed span (a multiple of 32)
constexpr int64_t kMaxHeadDim = 256;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Whether this path takes a head of d elements.
inline bool takes_head_dim(int64_t d) { return d % 32 == 0 && d <= kMaxHeadDim; }

// Per-thread buffers, sized for the largest call.
struct Scratch {
  std::vector<BFloat16> query;      // [kMaxQueries, D]
  std::vector<float> acc;           // [kMaxQueries, D]
  std::vector<float> row_max, row_sum;  // [kMaxQueries]
  std::vector<uint32_t> keys;       // [kSpan / 16][D / 32][16 pairs][16 keys]
  std::vector<uint16_t> values;     // [kSpan / 32][D / 16][16 key pairs][32]
  std::vector<float> scores;        // [16, kSpan]
  std::vector<BFloat16> weights;    // [16, kSpan]
  explicit Scratch(int64_t d)
      : query(kMaxQueries * d), acc(kMaxQueries * d), row_max(kMaxQueries),
        row_sum(kMaxQueries), keys(kSpan * d / 2), values(kSpan * d), scores(16 * kSpan),
        weights(16 * kSpan) {}
};

// The call's geometry: rows of one segment and one kv head.
struct ChunkTask {
  const BFloat16* query;  // row 0, query head kv * G
  int64_t query_row_stride, query_head_stride;
  BFloat16* out;  // row 0, head kv * G; rows out_row_stride apart, heads d apart
  int64_t out_row_stride;
  const BFloat16* keys;    // pool + kv * d (add a key's offset)
  const BFloat16* values;  // pool + kv * d
  int64_t num_rows, group, head_dim, first_position, window;  // window 0: none
  float scale;
};

// The 16 x 16 matrix of 32-bit lanes in r, transposed in place.
inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xDD);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xDD);
  }
}

// keys[kb][c][p][k] = the 32-bit pair p of chunk c of span key 16 kb + k
// (K^T, pair-interleaved: the B tile of S = Q . K^T); zero past n.
inline void pack_keys(const ChunkTask& t, const int64_t* offsets, int64_t n, int64_t n_pad,
                      uint32_t* out) {
  const int64_t chunks = t.head_dim / 32;
  __m512i rows[16];
  for (int64_t kb = 0; kb < n_pad / 16; ++kb)
    for (int64_t c = 0; c < chunks; ++c) {
      for (int64_t k = 0; k < 16; ++k) {
        const int64_t i = kb * 16 + k;
        rows[k] = i < n ? _mm512_loadu_si512(t.keys + offsets[i] + 32 * c) : _mm512_setzero_si512();
      }
      transpose16(rows);
      uint32_t* tile = out + (kb * chunks + c) * 256;
      for (int p = 0; p < 16; ++p) _mm512_storeu_si512(tile + p * 16, rows[p]);
    }
}

// values[kb][j][p][2e + s] = element 16 j + e of span key 32 kb + 2p + s (the
// B tile of acc += P . V); zero past n.
inline void pack_values(const ChunkTask& t, const int64_t* offsets, int64_t n, int64_t n_pad,
                        uint16_t* out) {
  const int64_t blocks = t.head_dim / 16;
  // Lane 2e + s of the interleave of rows a (s = 0) and b (s = 1), elements e of a 32-element half.
  alignas(64) int16_t low_index[32], high_index[32];
  for (int e = 0; e < 16; ++e)
    for (int s = 0; s < 2; ++s) {
      low_index[2 * e + s] = static_cast<int16_t>(e + 32 * s);
      high_index[2 * e + s] = static_cast<int16_t>(16 + e + 32 * s);
    }
  const __m512i low = _mm512_load_si512(low_index), high = _mm512_load_si512(high_index);
  for (int64_t i = 0; i < n_pad; i += 2) {
    uint16_t* pair = out + (i / 32) * blocks * 512 + (i % 32) / 2 * 32;
    for (int64_t h = 0; h < t.head_dim / 32; ++h) {
      const __m512i a = i < n ? _mm512_loadu_si512(t.values + offsets[i] + 32 * h)
                              : _mm512_setzero_si512();
      const __m512i b = i + 1 < n ? _mm512_loadu_si512(t.values + offsets[i + 1] + 32 * h)
                                  : _mm512_setzero_si512();
      _mm512_storeu_si512(pair + (2 * h) * 512, _mm512_permutex2var_epi16(a, low, b));
      _mm512_storeu_si512(pair + (2 * h + 1) * 512, _mm512_permutex2var_epi16(a, high, b));
    }
  }
}

// 2^y for y <= 0 (-inf included: a hidden key), within ~3e-6 relative: the
// weights are rounded to bf16 next, so this trades simd.h's exp16 accuracy for
// about half its instructions. Below 2^-126 it returns a tiny normal, not 0,
// which adds nothing visible to a sum or to P . V.
inline __m512 exp2_nonpositive(__m512 y) {
  y = _mm512_max_ps(y, _mm512_set1_ps(-126.f));
  const __m512 n = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(y, n);  // [-0.5, 0.5]
  __m512 p = _mm512_set1_ps(1.3333558146428443e-3f);  // (ln 2)^k / k!, k = 5 .. 0
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618129107628477e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550410866482158e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.2402265069591007f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931471805599453f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

// Hide the keys of row scores [0, n_pad) outside [visible_lo, visible_hi)
// (span-relative) with -inf; returns the largest score left.
inline float mask_row(float* scores, int64_t n_pad, int64_t visible_lo, int64_t visible_hi) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i lo = _mm512_set1_epi32(static_cast<int>(std::clamp<int64_t>(visible_lo, 0, kSpan)));
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(std::clamp<int64_t>(visible_hi, 0, kSpan)));
  __m512 best = _mm512_set1_ps(kNegInf);
  for (int64_t k = 0; k < n_pad; k += 16) {
    const __m512i key = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(k)));
    const __mmask16 live = _mm512_cmplt_epi32_mask(key, hi) & _mm512_cmpge_epi32_mask(key, lo);
    const __m512 x = _mm512_mask_mov_ps(_mm512_set1_ps(kNegInf), live, _mm512_loadu_ps(scores + k));
    _mm512_storeu_ps(scores + k, x);
    best = _mm512_max_ps(best, x);
  }
  return _mm512_reduce_max_ps(best);
}


// One streaming-softmax step for the 16 query rows of block qb over span keys
// [start, start + n_pad): raw scores -> bf16 weights e^(scale * (s - max)),
// running max (of raw scores; scale > 0 keeps the order), sum and the
// accumulator rows rescaled. Only rows that do not see the whole span mask.
// The per-row statistics are taken sixteen rows at a time (lane r: row r).
// Rows past n_q (padding) are attended like the others and never stored.
inline void softmax_block(const ChunkTask& t, int64_t qb, int64_t start, int64_t n_pad,
                          Scratch& s) {
  const int64_t d = t.head_dim;
  const float factor = t.scale * 1.4426950408889634f;  // scale / ln 2
  __m512 best[16], total[16];
  for (int64_t r = 0; r < 16; ++r) {
    float* scores = s.scores.data() + r * kSpan;
    const int64_t position = t.first_position + (qb * 16 + r) / t.group;
    const int64_t visible_hi = position + 1 - start;  // span keys below this are causal-visible
    const int64_t visible_lo = t.window > 0 ? position + 1 - t.window - start : 0;
    if (visible_hi < n_pad || visible_lo > 0) {
      best[r] = _mm512_set1_ps(mask_row(scores, n_pad, visible_lo, visible_hi));
    } else {
      best[r] = _mm512_loadu_ps(scores);
      for (int64_t k = 16; k < n_pad; k += 16) best[r] = _mm512_max_ps(best[r], _mm512_loadu_ps(scores + k));
    }
  }
  float* row_max = s.row_max.data() + qb * 16;
  const __m512 old_max = _mm512_loadu_ps(row_max);
  const __m512 new_max = _mm512_max_ps(old_max, reduce16<max_ps>(best));
  // A row that has seen no visible key yet keeps max -inf and shifts by 0.
  const __m512 shift = _mm512_mask_mov_ps(
      new_max, _mm512_cmp_ps_mask(new_max, _mm512_set1_ps(kNegInf), _CMP_EQ_OQ), _mm512_setzero_ps());
  const __m512 scaled = _mm512_set1_ps(factor);
  const __m512 correction = exp2_nonpositive(_mm512_mul_ps(_mm512_sub_ps(old_max, shift), scaled));
  _mm512_storeu_ps(row_max, new_max);
  alignas(64) float offsets[16], corrections[16];
  _mm512_store_ps(offsets, _mm512_mul_ps(shift, _mm512_set1_ps(-factor)));
  _mm512_store_ps(corrections, correction);
  for (int64_t r = 0; r < 16; ++r) {
    const float* scores = s.scores.data() + r * kSpan;
    BFloat16* weights = s.weights.data() + r * kSpan;
    const __m512 offset = _mm512_set1_ps(offsets[r]);
    total[r] = _mm512_setzero_ps();
    for (int64_t k = 0; k < n_pad; k += 16) {
      const __m512 w = exp2_nonpositive(_mm512_fmadd_ps(_mm512_loadu_ps(scores + k), scaled, offset));
      total[r] = _mm512_add_ps(total[r], w);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(weights + k), (__m256i)_mm512_cvtneps_pbh(w));
    }
    if (corrections[r] != 1.f) {
      float* acc = s.acc.data() + (qb * 16 + r) * d;
      const __m512 c = _mm512_set1_ps(corrections[r]);
      for (int64_t e = 0; e < d; e += 16)
        _mm512_storeu_ps(acc + e, _mm512_mul_ps(_mm512_loadu_ps(acc + e), c));
    }
  }
  float* row_sum = s.row_sum.data() + qb * 16;
  _mm512_storeu_ps(row_sum, _mm512_fmadd_ps(_mm512_loadu_ps(row_sum), correction,
                                            reduce16<add_ps>(total)));
}

// Whether query block qb sees no key of span [start, stop).
inline bool block_skips(const ChunkTask& t, int64_t qb, int64_t n_q, int64_t start, int64_t stop) {
  const int64_t first_row = qb * 16 / t.group;
  const int64_t last_row = (std::min(n_q, qb * 16 + 16) - 1) / t.group;
  if (start > t.first_position + last_row) return true;  // every key in the future
  return t.window > 0 && stop <= t.first_position + first_row + 1 - t.window;
}

// The call: `offsets(lo, hi, out)` writes the pool offsets (elements) of keys
// [lo, hi); the keys a task sees are [lo, hi). The thread holds a TileSession.
template <typename Locate>
void attend(const ChunkTask& t, int64_t lo, int64_t hi, const Locate& locate, Scratch& s) {
  const int64_t d = t.head_dim, n_q = t.num_rows * t.group, blocks = (n_q + 15) / 16;
  for (int64_t q = 0; q < blocks * 16; ++q) {
    BFloat16* dst = s.query.data() + q * d;
    if (q < n_q) {
      std::memcpy(dst, t.query + (q / t.group) * t.query_row_stride + (q % t.group) * t.query_head_stride,
                  d * sizeof(BFloat16));
    } else {
      std::memset(static_cast<void*>(dst), 0, d * sizeof(BFloat16));
    }
  }
  std::fill(s.acc.begin(), s.acc.begin() + blocks * 16 * d, 0.f);
  std::fill(s.row_max.begin(), s.row_max.begin() + blocks * 16, kNegInf);
  std::fill(s.row_sum.begin(), s.row_sum.begin() + blocks * 16, 0.f);
  int64_t offsets[kSpan];
  const int64_t chunks = d / 32;
  for (int64_t start = lo; start < hi; start += kSpan) {
    const int64_t n = std::min(kSpan, hi - start), n_pad = (n + 31) / 32 * 32;
    locate(start, start + n, offsets);
    pack_keys(t, offsets, n, n_pad, s.keys.data());
    pack_values(t, offsets, n, n_pad, s.values.data());
    for (int64_t qb = 0; qb < blocks; ++qb) {
      if (block_skips(t, qb, n_q, start, start + n)) continue;
      const BFloat16* query = s.query.data() + qb * 16 * d;
      // Keys past the block's last row are hidden from all its rows: stop at
      // the 32-key pair block that holds that row's own key.
      const int64_t last_row = (std::min(n_q, qb * 16 + 16) - 1) / t.group;
      const int64_t n_block =
          std::min(n_pad, (t.first_position + last_row + 1 - start + 31) / 32 * 32);
      // Two independent accumulator tiles at a time (key blocks kb, kb + 1,
      // then dimension blocks j, j + 1), sharing each A tile load.
      for (int64_t kb = 0; kb < n_block / 16; kb += 2) {
        _tile_zero(0);
        _tile_zero(1);
        for (int64_t c = 0; c < chunks; ++c) {
          _tile_loadd(2, query + 32 * c, d * 2);
          _tile_loadd(4, s.keys.data() + (kb * chunks + c) * 256, 64);
          _tile_loadd(3, s.keys.data() + ((kb + 1) * chunks + c) * 256, 64);
          _tile_dpbf16ps(0, 2, 4);
          _tile_dpbf16ps(1, 2, 3);
        }
        _tile_stored(0, s.scores.data() + kb * 16, kSpan * 4);
        _tile_stored(1, s.scores.data() + kb * 16 + 16, kSpan * 4);
      }
      softmax_block(t, qb, start, n_block, s);
      float* acc = s.acc.data() + qb * 16 * d;
      for (int64_t j = 0; j < d / 16; j += 2) {
        _tile_loadd(0, acc + 16 * j, d * 4);
        _tile_loadd(1, acc + 16 * j + 16, d * 4);
        for (int64_t kb = 0; kb < n_block / 32; ++kb) {
          _tile_loadd(3, s.weights.data() + 32 * kb, kSpan * 2);
          _tile_loadd(4, s.values.data() + (kb * (d / 16) + j) * 512, 64);
          _tile_loadd(2, s.values.data() + (kb * (d / 16) + j + 1) * 512, 64);
          _tile_dpbf16ps(0, 3, 4);
          _tile_dpbf16ps(1, 3, 2);
        }
        _tile_stored(0, acc + 16 * j, d * 4);
        _tile_stored(1, acc + 16 * j + 16, d * 4);
      }
    }
  }
  for (int64_t q = 0; q < n_q; ++q) {
    const float inverse = 1.f / s.row_sum[q];
    const float* acc = s.acc.data() + q * d;
    BFloat16* dst = t.out + (q / t.group) * t.out_row_stride + (q % t.group) * d;
    for (int64_t e = 0; e < d; e += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + e),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(acc + e),
                                                                    _mm512_set1_ps(inverse))));
  }
}

}  // namespace iterserve_amx_chunk
#endif
