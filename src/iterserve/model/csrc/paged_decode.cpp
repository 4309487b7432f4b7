// Request-local attention that reads K/V rows in place from the paged pool,
// for every segment of a packed batch: decode rows and multi-row chunks alike.
//
// Segment i owns packed rows [offsets[i], offsets[i+1]) at positions
// context_lens[i] + k; its keys are pool rows [0, position] read through its
// block table. Key u is visible to the row at position p iff u <= p and, with
// a window W > 0, u > p - W (spec 0x04). Query head h uses kv head h / G,
// G = H / KV (the Hugging Face repeat_kv convention).
//
// Work is cut into tasks: up to kTileRows consecutive rows of one segment and
// its kv heads (all of them unless there are too few tiles to keep every
// thread busy); per kv head the n_q = rows * G query vectors share every key
// row read. A task walks its keys in spans of up to kSpan, prefetching the
// next span's K/V rows (scattered blocks defeat the hardware prefetcher; this
// keeps many misses in flight while the current span computes). Per span and
// kv head: score the span against the queries (q . k, float32, a register tile
// of queries per key load), hide keys a row may not see (-inf), take one
// streaming-softmax step (raise the running max, rescale sum and accumulator,
// turn scores into weights), and accumulate the weighted V rows (a register
// tile of accumulators per value load). The output is acc / sum per query.
// A multi-row tile of bf16 heads goes to amx_chunk.h instead where the CPU
// has the AMX tile unit (chunk_tiles); model/attention.py sends chunks here
// only then: elsewhere SDPA's GEMMs beat these float32 dot products.
//
// Shapes: query [Q, H, D] (stride(2) == 1), pools [N, block_size, KV, D]
// contiguous, block_tables [S, max_blocks], offsets [S + 1], context_lens [S]
// int64 contiguous. Output [Q, H, D] contiguous.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include "amx_chunk.h"
#include "amx_score.h"
#include "simd.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

#ifdef __AVX512F__
using namespace iterserve_simd;
#endif

constexpr int64_t kSpan = 128;     // keys per softmax step and prefetch
constexpr int64_t kTileRows = 16;  // rows of a chunk per task
#ifdef ITERSERVE_HAS_AMX
// Query vectors (rows x G) of a chunk task on the tile unit (amx_chunk.h).
constexpr int64_t kAmxChunkQueries = iterserve_amx_chunk::kMaxQueries;
#else
constexpr int64_t kAmxChunkQueries = kTileRows;
#endif
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline float to_float(float x) { return x; }
inline float to_float(double x) { return static_cast<float>(x); }
inline float to_float(c10::BFloat16 x) { return static_cast<float>(x); }
inline float to_float(c10::Half x) { return static_cast<float>(x); }

struct Geometry {
  int64_t num_heads, num_kv_heads, head_dim, block_size, max_blocks;
  int64_t query_row_stride, query_head_stride;
  int64_t window;  // 0: no window
  float softmax_scale;
  int64_t group() const { return num_heads / num_kv_heads; }
  int64_t row_stride() const { return num_kv_heads * head_dim; }  // pool row, elements
};

// Rows [row_begin, row_begin + num_rows) of one segment, the first at first_position.
struct Tile {
  int64_t segment, row_begin, num_rows, first_position;
};

// A unit of work: a tile and its kv heads from head_begin (Kernel::kv_heads_per_task of them).
struct Task {
  const Tile& tile;
  int64_t head_begin;
};

// Per kv head of a task, for its n_q <= kTileRows * G queries (query q = row m,
// head j: q = m * G + j): scaled queries and accumulators [n_q, D], running
// max / sum and this span's shift [n_q].
struct HeadState {
  std::vector<float> query, acc, running_max, running_sum, shift;
  explicit HeadState(const Geometry& g)
      : query(kTileRows * g.group() * g.head_dim), acc(query.size()),
        running_max(kTileRows * g.group()), running_sum(running_max.size()),
        shift(running_max.size()) {}
};

// Per thread: a state per kv head, one span's scores [kSpan, n_q] (key-major),
// the pool-row offsets (elements) of this span's keys and of the next span's.
struct Scratch {
  std::vector<HeadState> heads;
  std::vector<float> scores;
  std::vector<int64_t> offsets, next_offsets;
  bool primed = false;  // offsets hold the next task's first span, already prefetched
#ifdef ITERSERVE_HAS_AMX
  std::optional<iterserve_amx_chunk::Scratch> chunk;  // made on a thread's first chunk task
#endif
  explicit Scratch(const Geometry& g)
      : heads(g.num_kv_heads, HeadState(g)), scores(kSpan * kTileRows * g.group()),
        offsets(kSpan), next_offsets(kSpan) {}
};

// The rows a span step prefetches while it computes: row i of the next span
// (this head's part, `bytes` long) as it reaches row i of its own.
template <typename T>
struct Ahead {
  const T* base;
  const int64_t* offsets;
  int64_t n, bytes;
  void fetch(int64_t i) const {
    if (i >= n) return;
    const char* row = reinterpret_cast<const char*>(base + offsets[i]);
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b);
    __builtin_prefetch(row + bytes - 1);
  }
};

// The span steps specialised for one head size: score (keys, their offsets,
// n, n_q, queries, scores, rows to prefetch, scale of the sums, pool row
// stride in elements) and
// accumulate (values, offsets, n, n_q, weights, accumulators, prefetch).
template <typename T>
using ScoreFn = void (*)(const T*, const int64_t*, int64_t, int64_t, const float*, float*,
                         const Ahead<T>&, float, int64_t);
template <typename T>
using AccumulateFn = void (*)(const T*, const int64_t*, int64_t, int64_t, const float*, float*,
                              const Ahead<T>&);

#ifdef __AVX512F__
template <typename T>
constexpr bool kHasLoad16 = !std::is_same_v<T, double>;

// Whether a vectorised bf16 head of d elements is held in even/odd order:
// each whole 32-element block as its 16 even elements, then its 16 odd ones
// (what load_even_odd yields), a trailing 16-element block as it is.
template <typename T>
constexpr bool kEvenOdd = std::is_same_v<T, c10::BFloat16>;

// A head row of T as C chunks of 16 float32 lanes, in the order above.
template <int C, typename T>
inline void load_row(const T* p, __m512 (&x)[C]) {
  if constexpr (kEvenOdd<T>) {
    for (int j = 0; j < C / 2; ++j) load_even_odd(p + 32 * j, x[2 * j], x[2 * j + 1]);
    if constexpr (C % 2 == 1) x[C - 1] = load16(p + 16 * (C - 1));
  } else {
    for (int c = 0; c < C; ++c) x[c] = load16(p + 16 * c);
  }
}

// Query rows per register tile for C 16-lane chunks per head: a power of two
// (it divides the 16 lanes of a reduction), at most 16 / C.
constexpr int max_tile_queries(int C) {
  return C > 8 ? 1 : C > 4 ? 2 : C > 2 ? 4 : C > 1 ? 8 : 16;
}

// q . k of R query rows against one key row in float32 lanes: out[r] holds
// row r's 16 partial sums. Queries in their natural order.
template <int C, int R, typename T>
struct FloatDot {
  __m512 query[R][C];
  FloatDot(const float* queries, int64_t q0, int64_t n_q) {
    for (int r = 0; r < R; ++r) {
      const float* src = queries + std::min<int64_t>(q0 + r, n_q - 1) * C * 16;
      for (int c = 0; c < C; ++c) query[r][c] = _mm512_loadu_ps(src + 16 * c);
    }
  }
  void operator()(const T* k, __m512* out) const {
    __m512 key[C];
    for (int c = 0; c < C; ++c) key[c] = load16(k + 16 * c);
    for (int r = 0; r < R; ++r) {
      __m512 sum = _mm512_mul_ps(query[r][0], key[0]);
      for (int c = 1; c < C; ++c) sum = _mm512_fmadd_ps(query[r][c], key[c], sum);
      out[r] = sum;
    }
  }
};

#ifdef __AVX512BF16__
// The same on bf16 pairs with vdpbf16ps: the key row feeds the products as
// stored (no widening), P = ceil(C / 2) vectors of 32 elements, the last one
// half filled when C is odd. Products of two bf16 are exact in float32, so
// this is the float32 dot product summed in another order, provided the query
// rows hold bf16 values (unscaled queries: the caller scales the sums).
template <int C, int R>
struct Bf16Dot {
  static constexpr int P = (C + 1) / 2;
  static constexpr __mmask32 kTail = C % 2 == 1 ? 0xFFFFu : 0xFFFFFFFFu;
  __m512bh query[R][P];
  Bf16Dot(const float* queries, int64_t q0, int64_t n_q) {
    for (int r = 0; r < R; ++r) {
      const float* src = queries + std::min<int64_t>(q0 + r, n_q - 1) * C * 16;
      for (int p = 0; p < P; ++p) {
        const __m512 low = _mm512_loadu_ps(src + 32 * p);
        const __m512 high = 2 * p + 1 < C ? _mm512_loadu_ps(src + 32 * p + 16) : _mm512_setzero_ps();
        query[r][p] = _mm512_cvtne2ps_pbh(high, low);
      }
    }
  }
  void operator()(const c10::BFloat16* k, __m512* out) const {
    __m512bh key[P];
    for (int p = 0; p < P; ++p)
      key[p] = (__m512bh)(p + 1 < P ? _mm512_loadu_si512(k + 32 * p)
                                     : _mm512_maskz_loadu_epi16(kTail, k + 32 * p));
    for (int r = 0; r < R; ++r) {
      __m512 sum = _mm512_dpbf16_ps(_mm512_setzero_ps(), query[r][0], key[0]);
      for (int p = 1; p < P; ++p) sum = _mm512_dpbf16_ps(sum, query[r][p], key[p]);
      out[r] = sum;
    }
  }
};
#endif

// Whether the score step of T takes unscaled queries and scales the sums.
template <typename T>
constexpr bool kScalesScores =
#ifdef __AVX512BF16__
    std::is_same_v<T, c10::BFloat16>;
#else
    false;
#endif

template <int C, int R, typename T>
using Dot = std::conditional_t<
#ifdef __AVX512BF16__
    kScalesScores<T>, Bf16Dot<C, R>,
#else
    false, void,
#endif
    FloatDot<C, R, T>>;

// scores[i, q] = scale * (query_q . key_i) for the span's n key rows: R query
// rows per key load, 16 / R keys per 16-way reduction.
template <int C, int R, typename T>
void score_rows(const T* keys, const int64_t* offsets, int64_t n, int64_t n_q,
                const float* queries, float* scores, const Ahead<T>& ahead, float scale) {
  constexpr int kKeys = 16 / R;
  const __m512 factor = _mm512_set1_ps(scale);
  for (int64_t q0 = 0; q0 < n_q; q0 += R) {
    const Dot<C, R, T> dot(queries, q0, n_q);
    const int64_t live = std::min<int64_t>(R, n_q - q0);
    for (int64_t i = 0; i < n; i += kKeys) {
      __m512 pending[16];
#pragma GCC unroll 16
      for (int k = 0; k < kKeys; ++k) {
        if (i + k < n) {
          if (q0 == 0) ahead.fetch(i + k);
          dot(keys + offsets[i + k], pending + k * R);
        } else {
          for (int r = 0; r < R; ++r) pending[k * R + r] = _mm512_setzero_ps();
        }
      }
      const __m512 sums = _mm512_mul_ps(reduce16<add_ps>(pending), factor);  // lane k * R + r
      if (n_q == R && i + kKeys <= n) {
        _mm512_storeu_ps(scores + i * R, sums);
        continue;
      }
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, sums);
      for (int k = 0; k < kKeys && i + k < n; ++k)
        for (int r = 0; r < live; ++r) scores[(i + k) * n_q + q0 + r] = lanes[k * R + r];
    }
  }
}

// acc[q] += sum_i weight[i, q] * value_i over the span, R accumulators per value load.
template <int C, int R, typename T>
void accumulate_rows(const T* values, const int64_t* offsets, int64_t n, int64_t n_q,
                     const float* scores, float* accumulators, const Ahead<T>& ahead) {
  for (int64_t q0 = 0; q0 < n_q; q0 += R) {
    const int64_t live = std::min<int64_t>(R, n_q - q0);
    int64_t column[R];
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r) {
      column[r] = std::min<int64_t>(q0 + r, n_q - 1);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_loadu_ps(accumulators + (column[r] * C + c) * 16);
    }
    for (int64_t i = 0; i < n; ++i) {
      if (q0 == 0) ahead.fetch(i);
      const T* v = values + offsets[i];
      const float* weights = scores + i * n_q;
      __m512 value[C];
      load_row<C>(v, value);
      for (int r = 0; r < R; ++r) {
        const __m512 w = _mm512_set1_ps(weights[column[r]]);
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(w, value[c], acc[r][c]);
      }
    }
    for (int r = 0; r < live; ++r)
      for (int c = 0; c < C; ++c) _mm512_storeu_ps(accumulators + (column[r] * C + c) * 16, acc[r][c]);
  }
}

// The span steps with the smallest tile of R >= n_q rows (at most the
// register budget's), so one decode row's G queries fill it.
template <int C, int R, typename T>
void score_span_vec(const T* keys, const int64_t* offsets, int64_t n, int64_t n_q,
                    const float* queries, float* scores, const Ahead<T>& ahead, float scale,
                    int64_t row_stride) {
  if constexpr (R > 1) {
    if (n_q <= R / 2)
      return score_span_vec<C, R / 2, T>(keys, offsets, n, n_q, queries, scores, ahead, scale,
                                         row_stride);
  }
  score_rows<C, R, T>(keys, offsets, n, n_q, queries, scores, ahead, scale);
}

#ifdef ITERSERVE_HAS_AMX
// bf16 heads of C = 2 * P chunks: the tile unit for up to 16 queries (decode
// rows), the vector steps for wider tiles (chunks).
template <int C>
void score_span_amx(const c10::BFloat16* keys, const int64_t* offsets, int64_t n, int64_t n_q,
                    const float* queries, float* scores, const Ahead<c10::BFloat16>& ahead,
                    float scale, int64_t row_stride) {
  if (n_q > iterserve_amx::kMaxQueries)
    return score_span_vec<C, max_tile_queries(C), c10::BFloat16>(
        keys, offsets, n, n_q, queries, scores, ahead, scale, row_stride);
  iterserve_amx::score_span<C / 2>(keys, offsets, n, n_q, queries, scores, scale, row_stride,
                                   [&](int64_t i) { ahead.fetch(i); });
}
#endif

template <int C, int R, typename T>
void accumulate_span_vec(const T* values, const int64_t* offsets, int64_t n, int64_t n_q,
                         const float* scores, float* accumulators, const Ahead<T>& ahead) {
  if constexpr (R > 1) {
    if (n_q <= R / 2)
      return accumulate_span_vec<C, R / 2, T>(values, offsets, n, n_q, scores, accumulators, ahead);
  }
  accumulate_rows<C, R, T>(values, offsets, n, n_q, scores, accumulators, ahead);
}

template <typename T, int C>
bool pick_vec(int64_t chunks, ScoreFn<T>& score, AccumulateFn<T>& accumulate) {
  if (chunks != C) return false;
  score = &score_span_vec<C, max_tile_queries(C), T>;
  accumulate = &accumulate_span_vec<C, max_tile_queries(C), T>;
  return true;
}
#ifdef ITERSERVE_HAS_AMX
template <int C>
bool pick_amx(int64_t chunks, ScoreFn<c10::BFloat16>& score) {
  if (chunks != C) return false;
  score = &score_span_amx<C>;
  return true;
}
#endif
#else
template <typename T>
constexpr bool kHasLoad16 = false;
template <typename T>
constexpr bool kScalesScores = false;
#endif

// The portable span steps: any head_dim, any dtype.
template <typename T>
void score_span_scalar(const T* keys, const int64_t* offsets, int64_t n, int64_t n_q,
                       const float* queries, float* scores, const Ahead<T>& ahead, int64_t d) {
  for (int64_t i = 0; i < n; ++i) {
    ahead.fetch(i);
    for (int64_t q = 0; q < n_q; ++q) {
      const T* k = keys + offsets[i];
      const float* query = queries + q * d;
      float sum = 0.f;
      for (int64_t e = 0; e < d; ++e) sum += query[e] * to_float(k[e]);
      scores[i * n_q + q] = sum;
    }
  }
}

template <typename T>
void accumulate_span_scalar(const T* values, const int64_t* offsets, int64_t n, int64_t n_q,
                            const float* scores, float* accumulators, const Ahead<T>& ahead,
                            int64_t d) {
  for (int64_t i = 0; i < n; ++i) {
    ahead.fetch(i);
    for (int64_t q = 0; q < n_q; ++q) {
      const T* v = values + offsets[i];
      const float w = scores[i * n_q + q];
      float* acc = accumulators + q * d;
      for (int64_t e = 0; e < d; ++e) acc[e] += w * to_float(v[e]);
    }
  }
}

// scores[i, q] := e^(scores[i, q] - shift[q]); running_sum[q] += the new row.
void exp_scores(int64_t n, int64_t n_q, float* scores, HeadState& h) {
#ifdef __AVX512F__
  if (16 % n_q == 0) {  // the shift pattern repeats every n_q lanes of the flat block
    alignas(64) float pattern[16], folded[16];
    for (int k = 0; k < 16; ++k) pattern[k] = h.shift[k % n_q];
    const __m512 shift = _mm512_load_ps(pattern);
    __m512 total = _mm512_setzero_ps();
    for (int64_t e = 0; e < n * n_q; e += 16) {
      const __mmask16 mask = tail_mask(n * n_q - e);
      const __m512 w = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, scores + e), shift));
      _mm512_mask_storeu_ps(scores + e, mask, w);
      total = _mm512_add_ps(total, _mm512_maskz_mov_ps(mask, w));
    }
    _mm512_store_ps(folded, total);
    for (int k = 0; k < 16; ++k) h.running_sum[k % n_q] += folded[k];
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < n_q; c += 16) {
      const __mmask16 mask = tail_mask(n_q - c);
      float* row = scores + i * n_q + c;
      const __m512 w = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, row),
                                           _mm512_maskz_loadu_ps(mask, h.shift.data() + c)));
      _mm512_mask_storeu_ps(row, mask, w);
      float* sum = h.running_sum.data() + c;
      _mm512_mask_storeu_ps(sum, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, sum), w));
    }
#else
  for (int64_t i = 0; i < n; ++i)
    for (int64_t q = 0; q < n_q; ++q) {
      float& x = scores[i * n_q + q];
      x = std::exp(x - h.shift[q]);
      h.running_sum[q] += x;
    }
#endif
}

// out[q] := max over i of scores[i, q], for the key-major [n, n_q] block.
void column_max(int64_t n, int64_t n_q, const float* scores, float* out) {
  std::fill(out, out + n_q, kNegInf);
#ifdef __AVX512F__
  if (16 % n_q == 0) {  // lane k of the flat block belongs to query k % n_q
    __m512 best = _mm512_set1_ps(kNegInf);
    for (int64_t e = 0; e < n * n_q; e += 16)
      best = _mm512_mask_max_ps(best, tail_mask(n * n_q - e), best,
                                _mm512_maskz_loadu_ps(tail_mask(n * n_q - e), scores + e));
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, best);
    for (int k = 0; k < 16; ++k) out[k % n_q] = std::max(out[k % n_q], lanes[k]);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i)
    for (int64_t q = 0; q < n_q; ++q) out[q] = std::max(out[q], scores[i * n_q + q]);
}

// One streaming-softmax step over a span of n scores per query. A query that
// has seen no visible key yet keeps max -inf and shifts by 0, so its hidden
// scores (-inf) become weight 0, never NaN.
void softmax_span(int64_t n, int64_t n_q, int64_t d, float* scores, HeadState& h) {
  column_max(n, n_q, scores, h.shift.data());
  for (int64_t q = 0; q < n_q; ++q) {
    const float new_max = std::max(h.running_max[q], h.shift[q]);
    const float shift = new_max == kNegInf ? 0.f : new_max;
    const float correction = std::exp(h.running_max[q] - shift);
    h.running_max[q] = new_max;
    h.shift[q] = shift;
    if (correction != 1.f) {
      h.running_sum[q] *= correction;
      float* acc = h.acc.data() + q * d;
      for (int64_t e = 0; e < d; ++e) acc[e] *= correction;
    }
  }
  exp_scores(n, n_q, scores, h);
}

// Hide the keys [lo, hi) of the span that row m of a multi-row tile may not see.
void mask_span(int64_t lo, int64_t hi, const Tile& tile, const Geometry& g, float* scores) {
  const int64_t group = g.group(), n_q = tile.num_rows * group;
  for (int64_t m = 0; m < tile.num_rows; ++m) {
    const int64_t row_hi = tile.first_position + m + 1;
    const int64_t row_lo = g.window > 0 ? std::max<int64_t>(0, row_hi - g.window) : 0;
    for (int64_t u = lo; u < hi; ++u) {
      if (u >= row_lo && u < row_hi) continue;
      float* row = scores + (u - lo) * n_q + m * group;
      std::fill(row, row + group, kNegInf);
    }
  }
}

template <typename T>
struct Kernel {
  const T *query, *key_pool, *value_pool;
  const int64_t* tables;
  T* out;
  Geometry g;
  int64_t kv_heads_per_task;
  ScoreFn<T> score = nullptr;  // null: the scalar steps
  AccumulateFn<T> accumulate = nullptr;
  bool even_odd = false;       // the accumulators hold heads in even/odd order (kEvenOdd)
  bool scales_scores = false;  // the score step scales its sums (kScalesScores)
  bool uses_tiles = false;     // the score step runs on the AMX tile unit
  bool amx_chunks = false;     // multi-row tiles go to amx_chunk.h (set with uses_tiles)

  // Where element e of a head sits in the accumulator rows.
  int64_t slot(int64_t e) const {
    if (!even_odd || e >= g.head_dim / 32 * 32) return e;
    return e / 32 * 32 + (e % 2) * 16 + (e % 32) / 2;
  }

  void load_queries(const Tile& tile, int64_t kv_head, HeadState& h) const {
    const int64_t d = g.head_dim, group = g.group(), n_q = tile.num_rows * group;
    for (int64_t m = 0; m < tile.num_rows; ++m)
      for (int64_t j = 0; j < group; ++j) {
        const T* src = query + (tile.row_begin + m) * g.query_row_stride +
                       (kv_head * group + j) * g.query_head_stride;
        float* dst = h.query.data() + (m * group + j) * d;
        const float scale = scales_scores ? 1.f : g.softmax_scale;
        for (int64_t e = 0; e < d; ++e) dst[e] = to_float(src[e]) * scale;
      }
    std::fill(h.acc.begin(), h.acc.begin() + n_q * d, 0.f);
    std::fill(h.running_max.begin(), h.running_max.begin() + n_q, kNegInf);
    std::fill(h.running_sum.begin(), h.running_sum.begin() + n_q, 0.f);
  }

  // offsets[u - lo] := the pool offset (elements) of key u's row, block by block.
  void locate(int64_t lo, int64_t hi, const Tile& tile, int64_t* offsets) const {
    const int64_t bs = g.block_size, row_stride = g.row_stride();
    const int64_t* table = tables + tile.segment * g.max_blocks;
    for (int64_t u = lo, logical = lo / bs; u < hi; ++logical) {
      const int64_t stop = std::min(hi, (logical + 1) * bs);
      int64_t offset = (table[logical] * bs + u - logical * bs) * row_stride;
      for (; u < stop; ++u, offset += row_stride) offsets[u - lo] = offset;
    }
  }

  // Ask for the task's part of n K and V rows ahead of their use, all at once
  // (a run's first span only: later spans are fetched while the one before computes).
  void prefetch(const int64_t* offsets, int64_t n, int64_t head_begin) const {
    const int64_t bytes = kv_heads_per_task * g.head_dim * static_cast<int64_t>(sizeof(T));
    for (int64_t i = 0; i < n; ++i) {
      const char* k = reinterpret_cast<const char*>(key_pool + offsets[i] + head_begin * g.head_dim);
      const char* v = reinterpret_cast<const char*>(value_pool + offsets[i] + head_begin * g.head_dim);
      for (int64_t b = 0; b < bytes; b += 64) {
        __builtin_prefetch(k + b);
        __builtin_prefetch(v + b);
      }
    }
  }

  // The keys [lo, hi) that some row of the tile sees.
  std::pair<int64_t, int64_t> key_range(const Tile& tile) const {
    const int64_t hi = tile.first_position + tile.num_rows;
    const int64_t lo = g.window > 0 ? std::max<int64_t>(0, tile.first_position + 1 - g.window) : 0;
    return {lo, hi};
  }

  // Span [lo, hi) for kv_head, prefetching the next span's rows of ahead_head
  // (s.next_offsets[0, num_ahead)) as it goes.
  void run_span(int64_t lo, int64_t hi, const Tile& tile, int64_t kv_head, int64_t ahead_head,
                int64_t num_ahead, Scratch& s) const {
    const int64_t n = hi - lo, n_q = tile.num_rows * g.group(), d = g.head_dim;
    HeadState& h = s.heads[kv_head];
    const T* keys = key_pool + kv_head * d;
    const T* values = value_pool + kv_head * d;
    const int64_t bytes = d * static_cast<int64_t>(sizeof(T));
    const Ahead<T> ahead_keys{key_pool + ahead_head * d, s.next_offsets.data(), num_ahead, bytes};
    const Ahead<T> ahead_values{value_pool + ahead_head * d, s.next_offsets.data(), num_ahead, bytes};
    if (score != nullptr) {
      score(keys, s.offsets.data(), n, n_q, h.query.data(), s.scores.data(), ahead_keys,
            scales_scores ? g.softmax_scale : 1.f, g.row_stride());
    } else {
      score_span_scalar(keys, s.offsets.data(), n, n_q, h.query.data(), s.scores.data(),
                        ahead_keys, d);
    }
    if (tile.num_rows > 1) mask_span(lo, hi, tile, g, s.scores.data());
    softmax_span(n, n_q, d, s.scores.data(), h);
    if (accumulate != nullptr) {
      accumulate(values, s.offsets.data(), n, n_q, s.scores.data(), h.acc.data(), ahead_values);
    } else {
      accumulate_span_scalar(values, s.offsets.data(), n, n_q, s.scores.data(), h.acc.data(),
                             ahead_values, d);
    }
    for (int64_t i = n; i < num_ahead; ++i) {  // a next span longer than this one
      ahead_keys.fetch(i);
      ahead_values.fetch(i);
    }
  }

  void store(const Tile& tile, int64_t kv_head, const HeadState& h) const {
    const int64_t d = g.head_dim, group = g.group(), n_q = tile.num_rows * group;
    for (int64_t q = 0; q < n_q; ++q) {
      const float inverse = 1.f / h.running_sum[q];
      T* dst = out + ((tile.row_begin + q / group) * g.num_heads + kv_head * group + q % group) * d;
      for (int64_t e = 0; e < d; ++e) dst[e] = static_cast<T>(h.acc[q * d + slot(e)] * inverse);
    }
  }

#ifdef ITERSERVE_HAS_AMX
  // A multi-row tile on the tile unit (amx_chunk.h), kv head by kv head.
  void attend_chunk(const Task& task, Scratch& s) const {
    const Tile& tile = task.tile;
    s.primed = false;  // the next task locates its own first span
    if (!s.chunk) s.chunk.emplace(g.head_dim);
    const auto [lo, hi] = key_range(tile);
    const int64_t d = g.head_dim, group = g.group();
    const auto locate_keys = [&](int64_t a, int64_t b, int64_t* at) { locate(a, b, tile, at); };
    for (int64_t h = task.head_begin; h < task.head_begin + kv_heads_per_task; ++h) {
      const iterserve_amx_chunk::ChunkTask chunk{
          query + tile.row_begin * g.query_row_stride + h * group * g.query_head_stride,
          g.query_row_stride, g.query_head_stride,
          out + (tile.row_begin * g.num_heads + h * group) * d, g.num_heads * d,
          key_pool + h * d, value_pool + h * d, tile.num_rows, group, d,
          tile.first_position, g.window, g.softmax_scale};
      iterserve_amx_chunk::attend(chunk, lo, hi, locate_keys, *s.chunk);
    }
  }
#endif

  // One task: the tile's rows, kv heads [head_begin, head_begin + kv_heads_per_task).
  // Its last span prefetches the first span of `next` (the run's next task, if
  // any), which then finds it located in s.offsets (s.primed).
  void attend(const Task& task, const Task* next, Scratch& s) const {
    const Tile& tile = task.tile;
#ifdef ITERSERVE_HAS_AMX
    if constexpr (std::is_same_v<T, c10::BFloat16>) {
      if (amx_chunks && tile.num_rows > 1) return attend_chunk(task, s);
    }
#endif
    const int64_t head_begin = task.head_begin, head_end = head_begin + kv_heads_per_task;
    for (int64_t h = head_begin; h < head_end; ++h) load_queries(tile, h, s.heads[h]);
    const auto [lo, hi] = key_range(tile);
    if (!s.primed) {
      locate(lo, std::min(hi, lo + kSpan), tile, s.offsets.data());
      prefetch(s.offsets.data(), std::min(hi, lo + kSpan) - lo, head_begin);
    }
    for (int64_t start = lo; start < hi; start += kSpan) {
      const int64_t stop = std::min(hi, start + kSpan);
      int64_t num_ahead = 0, ahead_begin = head_begin;
      if (stop < hi) {
        num_ahead = std::min(hi, stop + kSpan) - stop;
        locate(stop, stop + num_ahead, tile, s.next_offsets.data());
      } else if (next != nullptr) {
        const auto [next_lo, next_hi] = key_range(next->tile);
        num_ahead = std::min(next_hi, next_lo + kSpan) - next_lo;
        locate(next_lo, next_lo + num_ahead, next->tile, s.next_offsets.data());
        ahead_begin = next->head_begin;
      }
      for (int64_t h = head_begin; h < head_end; ++h)
        run_span(start, stop, tile, h, ahead_begin + h - head_begin, num_ahead, s);
      std::swap(s.offsets, s.next_offsets);
    }
    s.primed = next != nullptr;
    for (int64_t h = head_begin; h < head_end; ++h) store(tile, h, s.heads[h]);
  }
};

// Decode rows are one-row tiles; a chunk is cut into tiles of chunk_rows rows.
std::vector<Tile> make_tiles(const int64_t* offsets, const int64_t* context_lens,
                             int64_t num_segments, int64_t chunk_rows) {
  std::vector<Tile> tiles;
  tiles.reserve(num_segments);
  for (int64_t i = 0; i < num_segments; ++i)
    for (int64_t row = offsets[i]; row < offsets[i + 1]; row += chunk_rows)
      tiles.push_back({i, row, std::min(chunk_rows, offsets[i + 1] - row),
                       context_lens[i] + row - offsets[i]});
  return tiles;
}

// Whole kv heads per task unless there are too few tiles to keep every thread
// busy; then the kv heads are split into equal parts.
int64_t kv_heads_per_task(int64_t num_tiles, int64_t num_kv_heads) {
  const int64_t wanted_tasks = 4 * static_cast<int64_t>(at::get_num_threads());
  int64_t per_task = num_kv_heads;
  while (per_task > 1 && num_tiles * (num_kv_heads / per_task) < wanted_tasks) {
    int64_t smaller = per_task - 1;
    while (num_kv_heads % smaller != 0) --smaller;
    per_task = smaller;
  }
  return per_task;
}

// Tasks (tile, kv head part) split into one contiguous run per thread of about
// equal cost (rows times keys read), so a long chunk does not leave a thread idle.
template <typename T>
void run_tasks(const Kernel<T>& kernel, const std::vector<Tile>& tiles) {
  const int64_t parts = kernel.g.num_kv_heads / kernel.kv_heads_per_task;
  const int64_t num_tasks = static_cast<int64_t>(tiles.size()) * parts;
  std::vector<double> cost_before(num_tasks + 1, 0.0);
  for (int64_t t = 0; t < num_tasks; ++t) {
    const Tile& tile = tiles[t / parts];
    const int64_t keys = tile.first_position + tile.num_rows;
    const int64_t span = kernel.g.window > 0 ? std::min(keys, kernel.g.window + tile.num_rows) : keys;
    cost_before[t + 1] = cost_before[t] + static_cast<double>(tile.num_rows) * (span + 8);
  }
  const int64_t num_runs = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), num_tasks));
  const double total = cost_before[num_tasks];
  auto first_task = [&](int64_t run) -> int64_t {
    if (run >= num_runs) return num_tasks;
    return std::lower_bound(cost_before.begin(), cost_before.end() - 1, total * run / num_runs) -
           cost_before.begin();
  };
  auto task = [&](int64_t t) -> Task {
    return {tiles[t / parts], (t % parts) * kernel.kv_heads_per_task};
  };
  at::parallel_for(0, num_runs, 1, [&](int64_t run_begin, int64_t run_end) {
#ifdef ITERSERVE_HAS_AMX
    const iterserve_amx::TileSession tiles(kernel.uses_tiles);
#endif
    Scratch scratch(kernel.g);
    const int64_t end = first_task(run_end);
    for (int64_t t = first_task(run_begin); t < end; ++t) {
      const Task next = t + 1 < end ? task(t + 1) : task(t);
      kernel.attend(task(t), t + 1 < end ? &next : nullptr, scratch);
    }
  });
}

template <typename T>
void run(const at::Tensor& query, const at::Tensor& key_pool, const at::Tensor& value_pool,
         const at::Tensor& block_tables, const at::Tensor& offsets,
         const at::Tensor& context_lens, const Geometry& g, at::Tensor& out) {
  Kernel<T> kernel{query.const_data_ptr<T>(), key_pool.const_data_ptr<T>(),
                   value_pool.const_data_ptr<T>(), block_tables.const_data_ptr<int64_t>(),
                   out.mutable_data_ptr<T>(), g, 0};
#ifdef __AVX512F__
  if constexpr (kHasLoad16<T>) {
    const int64_t chunks = g.head_dim % 16 == 0 ? g.head_dim / 16 : 0;
    ScoreFn<T>& s = kernel.score;
    AccumulateFn<T>& a = kernel.accumulate;
    (void)(pick_vec<T, 1>(chunks, s, a) || pick_vec<T, 2>(chunks, s, a) ||
           pick_vec<T, 3>(chunks, s, a) || pick_vec<T, 4>(chunks, s, a) ||
           pick_vec<T, 5>(chunks, s, a) || pick_vec<T, 6>(chunks, s, a) ||
           pick_vec<T, 8>(chunks, s, a) || pick_vec<T, 10>(chunks, s, a) ||
           pick_vec<T, 12>(chunks, s, a) || pick_vec<T, 16>(chunks, s, a));
#ifdef ITERSERVE_HAS_AMX
    if constexpr (std::is_same_v<T, c10::BFloat16> && kScalesScores<T>) {
      kernel.uses_tiles =
          s != nullptr && iterserve_amx::tiles_permitted() &&
          (pick_amx<2>(chunks, s) || pick_amx<4>(chunks, s) || pick_amx<6>(chunks, s) ||
           pick_amx<8>(chunks, s) || pick_amx<10>(chunks, s) || pick_amx<12>(chunks, s) ||
           pick_amx<16>(chunks, s));
      kernel.amx_chunks = kernel.uses_tiles && iterserve_amx_chunk::takes_head_dim(g.head_dim);
    }
#endif
    kernel.even_odd = kEvenOdd<T> && s != nullptr;
    kernel.scales_scores = kScalesScores<T> && s != nullptr;
  }
#endif
  // A chunk tile on the tile unit packs each key span once for all its rows.
  const int64_t chunk_rows = kernel.amx_chunks ? std::max<int64_t>(1, kAmxChunkQueries / g.group())
                                               : kTileRows;
  const std::vector<Tile> tiles = make_tiles(offsets.const_data_ptr<int64_t>(),
                                             context_lens.const_data_ptr<int64_t>(),
                                             block_tables.size(0), chunk_rows);
  kernel.kv_heads_per_task = kv_heads_per_task(static_cast<int64_t>(tiles.size()), g.num_kv_heads);
  run_tasks(kernel, tiles);
}

void check_inputs(const at::Tensor& query, const at::Tensor& key_pool, const at::Tensor& value_pool,
                  const at::Tensor& block_tables, const at::Tensor& offsets,
                  const at::Tensor& context_lens) {
  TORCH_CHECK(query.dim() == 3 && key_pool.dim() == 4, "query [Q, H, D], pools [N, bs, KV, D]");
  TORCH_CHECK(query.device().is_cpu() && key_pool.device().is_cpu(), "CPU tensors only");
  TORCH_CHECK(query.stride(2) == 1, "query head_dim must be contiguous");
  TORCH_CHECK(key_pool.is_contiguous() && value_pool.is_contiguous(), "pools must be contiguous");
  TORCH_CHECK(key_pool.sizes() == value_pool.sizes(), "key and value pools differ in shape");
  TORCH_CHECK(query.scalar_type() == key_pool.scalar_type() &&
                  key_pool.scalar_type() == value_pool.scalar_type(),
              "query and pools must share a dtype");
  TORCH_CHECK(key_pool.size(3) == query.size(2), "pool head_dim differs from the query's");
  TORCH_CHECK(query.size(1) % key_pool.size(2) == 0, "num_heads must be a multiple of num_kv_heads");
  const int64_t num_segments = block_tables.size(0);
  TORCH_CHECK(block_tables.scalar_type() == at::kLong && block_tables.is_contiguous() &&
                  block_tables.dim() == 2,
              "block_tables [S, max_blocks] int64 contiguous");
  TORCH_CHECK(offsets.scalar_type() == at::kLong && offsets.is_contiguous() &&
                  offsets.numel() == num_segments + 1,
              "offsets [S + 1] int64 contiguous");
  TORCH_CHECK(context_lens.scalar_type() == at::kLong && context_lens.is_contiguous() &&
                  context_lens.numel() == num_segments,
              "context_lens [S] int64 contiguous");
  const int64_t* o = offsets.const_data_ptr<int64_t>();
  const int64_t* c = context_lens.const_data_ptr<int64_t>();
  const int64_t* tables = block_tables.const_data_ptr<int64_t>();
  const int64_t max_blocks = block_tables.size(1), block_size = key_pool.size(1);
  TORCH_CHECK(o[0] == 0 && o[num_segments] == query.size(0), "offsets must span the query rows");
  for (int64_t i = 0; i < num_segments; ++i) {
    TORCH_CHECK(o[i + 1] > o[i] && c[i] >= 0, "segments need rows and a context length >= 0");
    const int64_t needed = (c[i] + o[i + 1] - o[i] + block_size - 1) / block_size;
    TORCH_CHECK(needed <= max_blocks, "a segment's rows run past its block table");
    for (int64_t b = 0; b < needed; ++b)
      TORCH_CHECK(tables[i * max_blocks + b] >= 0 && tables[i * max_blocks + b] < key_pool.size(0),
                  "block id out of the pool");
  }
}

at::Tensor paged_attention(const at::Tensor& query, const at::Tensor& key_pool,
                           const at::Tensor& value_pool, const at::Tensor& block_tables,
                           const at::Tensor& offsets, const at::Tensor& context_lens,
                           int64_t window, double softmax_scale) {
  check_inputs(query, key_pool, value_pool, block_tables, offsets, context_lens);
  const Geometry g{query.size(1),        key_pool.size(2), query.size(2), key_pool.size(1),
                   block_tables.size(1), query.stride(0),  query.stride(1), window,
                   static_cast<float>(softmax_scale)};
  at::Tensor out = at::empty({query.size(0), g.num_heads, g.head_dim}, query.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, query.scalar_type(), "paged_attention",
                                  [&] { run<scalar_t>(query, key_pool, value_pool, block_tables,
                                                      offsets, context_lens, g, out); });
  return out;
}

// Whether a bf16 call with heads of head_dim attends its multi-row segments on
// the AMX tile unit (amx_chunk.h): the head sizes run() gives the tile scores.
bool chunk_tiles(int64_t head_dim) {
#if defined(ITERSERVE_HAS_AMX) && defined(__AVX512BF16__)
  switch (head_dim) {
    case 32: case 64: case 96: case 128: case 160: case 192: case 256:
      return iterserve_amx::tiles_permitted();
    default:
      return false;
  }
#else
  (void)head_dim;
  return false;
#endif
}

}  // namespace

// One namespace per build (model/kernels.py passes it), so that two builds
// can be loaded in one process.
#ifndef ITERSERVE_OPS
#define ITERSERVE_OPS iterserve_kernels
#endif

TORCH_LIBRARY(ITERSERVE_OPS, m) {
  m.def("paged_attention(Tensor query, Tensor key_pool, Tensor value_pool, Tensor block_tables, "
        "Tensor offsets, Tensor context_lens, int window, float softmax_scale) -> Tensor");
  m.impl("paged_attention", c10::DispatchKey::CPU, &paged_attention);
  m.def("chunk_tiles(int head_dim) -> bool", &chunk_tiles);
}
