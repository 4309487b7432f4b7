// Decode attention that reads K/V rows in place from the paged pool.
//
// One task per sequence (or per part of its kv heads when there are few
// sequences): walk the sequence's block table over the pool, reading each
// key row once, score it against the G = H / KV query heads of its kv head
// (q . k, float32), keep a streaming softmax per query head (running max m
// and sum l, rescaled once per block), accumulate the weighted V rows and
// write acc / l. Query head h uses kv head h / G (the
// Hugging Face repeat_kv convention). Key u is visible to the row at position
// p iff u <= p and, with a window W > 0, u > p - W (spec 0x04).
//
// Shapes: query [B, H, D] (stride(2) == 1), pools [N, block_size, KV, D]
// contiguous, block_tables [B, max_blocks] int64, positions [B] int64.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <limits>
#include <vector>

namespace {

inline float to_float(float x) { return x; }
inline float to_float(double x) { return static_cast<float>(x); }
inline float to_float(c10::BFloat16 x) { return static_cast<float>(x); }
inline float to_float(c10::Half x) { return static_cast<float>(x); }

#ifdef __AVX512F__
// 16 float32 lanes from a float/bf16/half row (the build uses -march=native).
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const c10::BFloat16* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline __m512 load16(const c10::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
template <typename T>
constexpr bool kHasLoad16 = !std::is_same_v<T, double>;

// Lane j of the result = the sum of the lanes of v[j]: sixteen horizontal sums
// for the price of about three.
inline __m512 reduce16(const __m512* v) {
  __m512 pairs[8], quads[4];
  for (int k = 0; k < 8; ++k)
    pairs[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                             _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
  for (int k = 0; k < 4; ++k) {
    const __m512d a = _mm512_castps_pd(pairs[2 * k]), b = _mm512_castps_pd(pairs[2 * k + 1]);
    quads[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // quads[k], 128-bit lane L, element e: lane-L part of the sum of v[4k + e]
  const __m512 low = _mm512_add_ps(_mm512_shuffle_f32x4(quads[0], quads[1], 0x88),
                                   _mm512_shuffle_f32x4(quads[0], quads[1], 0xDD));
  const __m512 high = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2], quads[3], 0x88),
                                    _mm512_shuffle_f32x4(quads[2], quads[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(low, high, 0x88),
                       _mm512_shuffle_f32x4(low, high, 0xDD));
}

// e^x for x <= 0 (Cephes expf: range reduction by ln 2, degree-6 polynomial,
// scale by 2^n), within a few float32 ulp.
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));  // e^-87 is nothing next to a sum >= 1
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
  return _mm512_scalef_ps(p, n);
}

inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}
#else
template <typename T>
constexpr bool kHasLoad16 = false;
#endif

struct Geometry {
  int64_t num_heads, num_kv_heads, head_dim, block_size, max_blocks;
  int64_t query_row_stride, query_head_stride;
  int64_t window;  // 0: no window
  float softmax_scale;
  int64_t kv_heads_per_task;  // a task: one sequence, this many consecutive kv heads
  int64_t group() const { return num_heads / num_kv_heads; }
  int64_t task_query_heads() const { return kv_heads_per_task * group(); }
  // the SIMD path: whole 16-lane chunks, at most 16 of them held per row
  bool is_vector_head() const { return head_dim % 16 == 0 && head_dim <= 256; }
};

// Per task, for its nq query heads (kv head h serves query heads h*G .. h*G+G-1):
// scaled queries and output accumulators [nq, D], one block of scores
// [block_size, nq] (key-major), the running max and sum, the block's max.
struct Scratch {
  std::vector<float> query, acc, scores, running_max, running_sum, block_max;
  explicit Scratch(const Geometry& g)
      : query(g.task_query_heads() * g.head_dim), acc(g.task_query_heads() * g.head_dim),
        scores(g.block_size * g.task_query_heads()), running_max(g.task_query_heads()),
        running_sum(g.task_query_heads()), block_max(g.task_query_heads()) {}
};

// scores[i, q] = query_q . key_i for the n key rows at `keys` (row i at i * row_stride).
template <typename T>
void score_block(const T* keys, int64_t n, const Geometry& g, Scratch& s) {
  const int64_t d = g.head_dim, group = g.group(), row_stride = g.num_kv_heads * d;
  float* out = s.scores.data();
#ifdef __AVX512F__
  if constexpr (kHasLoad16<T>) {
    if (g.is_vector_head()) {
      const int64_t chunks = d / 16;
      __m512 key[16], pending[16];
      int filled = 0;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t h = 0; h < g.kv_heads_per_task; ++h) {
          const T* k = keys + i * row_stride + h * d;
          for (int64_t c = 0; c < chunks; ++c) key[c] = load16(k + 16 * c);
          for (int64_t j = 0; j < group; ++j) {
            const float* q = s.query.data() + (h * group + j) * d;
            __m512 sum = _mm512_mul_ps(_mm512_loadu_ps(q), key[0]);
            for (int64_t c = 1; c < chunks; ++c)
              sum = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * c), key[c], sum);
            pending[filled++] = sum;
            if (filled == 16) {
              _mm512_storeu_ps(out, reduce16(pending));
              out += 16;
              filled = 0;
            }
          }
        }
      }
      for (int j = 0; j < filled; ++j) out[j] = _mm512_reduce_add_ps(pending[j]);
      return;
    }
  }
#endif
  for (int64_t i = 0; i < n; ++i)
    for (int64_t q = 0; q < g.task_query_heads(); ++q) {
      const T* k = keys + i * row_stride + (q / group) * d;
      const float* query = s.query.data() + q * d;
      float sum = 0.f;
      for (int64_t e = 0; e < d; ++e) sum += query[e] * to_float(k[e]);
      *out++ = sum;
    }
}

// row[q] := exp(row[q] - max[q]); sum[q] += row[q], for q < nq.
inline void exp_row(float* row, const float* max, float* sum, int64_t nq) {
#ifdef __AVX512F__
  for (int64_t c = 0; c < nq; c += 16) {
    const __mmask16 mask = tail_mask(nq - c);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, row + c),
                                         _mm512_maskz_loadu_ps(mask, max + c)));
    _mm512_mask_storeu_ps(row + c, mask, e);
    _mm512_mask_storeu_ps(sum + c, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, sum + c), e));
  }
#else
  for (int64_t q = 0; q < nq; ++q) {
    row[q] = std::exp(row[q] - max[q]);
    sum[q] += row[q];
  }
#endif
}

// The streaming-softmax step for one block of n scores per query head: raise
// the running max, rescale the running sum and accumulator by e^(old - new),
// turn the scores into weights e^(score - new max).
void softmax_block(int64_t n, const Geometry& g, Scratch& s) {
  const int64_t nq = g.task_query_heads(), d = g.head_dim;
  std::fill(s.block_max.begin(), s.block_max.end(), -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t q = 0; q < nq; ++q) s.block_max[q] = std::max(s.block_max[q], s.scores[i * nq + q]);
  for (int64_t q = 0; q < nq; ++q) {
    const float new_max = std::max(s.running_max[q], s.block_max[q]);
    const float correction = std::exp(s.running_max[q] - new_max);
    s.running_max[q] = new_max;
    s.running_sum[q] *= correction;
    if (correction != 1.f)
      for (int64_t e = 0; e < d; ++e) s.acc[q * d + e] *= correction;
  }
  for (int64_t i = 0; i < n; ++i)
    exp_row(s.scores.data() + i * nq, s.running_max.data(), s.running_sum.data(), nq);
}

// acc[q] += sum_i weight[i, q] * value_i for the n value rows at `values`.
template <typename T>
void accumulate_block(const T* values, int64_t n, const Geometry& g, Scratch& s) {
  const int64_t d = g.head_dim, group = g.group(), nq = g.task_query_heads();
  const int64_t row_stride = g.num_kv_heads * d;
#ifdef __AVX512F__
  if constexpr (kHasLoad16<T>) {
    if (g.is_vector_head()) {
      const int64_t chunks = d / 16;
      __m512 value[16];
      for (int64_t i = 0; i < n; ++i) {
        const float* weights = s.scores.data() + i * nq;
        for (int64_t h = 0; h < g.kv_heads_per_task; ++h) {
          const T* v = values + i * row_stride + h * d;
          for (int64_t c = 0; c < chunks; ++c) value[c] = load16(v + 16 * c);
          for (int64_t j = 0; j < group; ++j) {
            const __m512 w = _mm512_set1_ps(weights[h * group + j]);
            float* acc = s.acc.data() + (h * group + j) * d;
            for (int64_t c = 0; c < chunks; ++c)
              _mm512_storeu_ps(acc + 16 * c,
                               _mm512_fmadd_ps(w, value[c], _mm512_loadu_ps(acc + 16 * c)));
          }
        }
      }
      return;
    }
  }
#endif
  for (int64_t i = 0; i < n; ++i)
    for (int64_t q = 0; q < nq; ++q) {
      const T* v = values + i * row_stride + (q / group) * d;
      const float w = s.scores[i * nq + q];
      float* acc = s.acc.data() + q * d;
      for (int64_t e = 0; e < d; ++e) acc[e] += w * to_float(v[e]);
    }
}

// One task: keys [lo, hi) of one sequence through its block table, kv heads
// [kv_begin, kv_begin + kv_heads_per_task); rows are read in pool order, so a
// block is one contiguous sweep when a task covers all kv heads.
template <typename T>
void attend_task(const T* query, const T* key_pool, const T* value_pool, const int64_t* table,
                 int64_t position, int64_t kv_begin, const Geometry& g, T* out, Scratch& s) {
  const int64_t d = g.head_dim, nq = g.task_query_heads(), head_begin = kv_begin * g.group();
  const int64_t hi = position + 1;
  const int64_t lo = g.window > 0 ? std::max<int64_t>(0, hi - g.window) : 0;
  for (int64_t q = 0; q < nq; ++q) {
    const T* src = query + (head_begin + q) * g.query_head_stride;
    for (int64_t e = 0; e < d; ++e) s.query[q * d + e] = to_float(src[e]) * g.softmax_scale;
  }
  std::fill(s.acc.begin(), s.acc.end(), 0.f);
  std::fill(s.running_max.begin(), s.running_max.end(), -std::numeric_limits<float>::infinity());
  std::fill(s.running_sum.begin(), s.running_sum.end(), 0.f);
  const int64_t row_stride = g.num_kv_heads * d;
  for (int64_t start = lo; start < hi;) {
    const int64_t logical = start / g.block_size;
    const int64_t stop = std::min(hi, (logical + 1) * g.block_size);
    const int64_t offset = (table[logical] * g.block_size + start - logical * g.block_size) *
                               row_stride + kv_begin * d;
    score_block(key_pool + offset, stop - start, g, s);
    softmax_block(stop - start, g, s);
    accumulate_block(value_pool + offset, stop - start, g, s);
    start = stop;
  }
  for (int64_t q = 0; q < nq; ++q) {
    const float inverse = 1.f / s.running_sum[q];
    T* dst = out + (head_begin + q) * d;
    for (int64_t e = 0; e < d; ++e) dst[e] = static_cast<T>(s.acc[q * d + e] * inverse);
  }
}

template <typename T>
void run(const at::Tensor& query, const at::Tensor& key_pool, const at::Tensor& value_pool,
         const at::Tensor& block_tables, const at::Tensor& positions, const Geometry& g,
         at::Tensor& out) {
  const T* q = query.const_data_ptr<T>();
  const T* k = key_pool.const_data_ptr<T>();
  const T* v = value_pool.const_data_ptr<T>();
  const int64_t* tables = block_tables.const_data_ptr<int64_t>();
  const int64_t* pos = positions.const_data_ptr<int64_t>();
  T* o = out.mutable_data_ptr<T>();
  const int64_t splits = g.num_kv_heads / g.kv_heads_per_task;
  at::parallel_for(0, query.size(0) * splits, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch(g);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / splits, kv_begin = (task % splits) * g.kv_heads_per_task;
      attend_task<T>(q + b * g.query_row_stride, k, v, tables + b * g.max_blocks, pos[b],
                     kv_begin, g, o + b * g.num_heads * g.head_dim, scratch);
    }
  });
}

// Whole kv heads per task unless there are too few sequences to keep every
// thread busy; then the kv heads are split into equal parts.
int64_t kv_heads_per_task(int64_t num_rows, int64_t num_kv_heads) {
  const int64_t wanted_tasks = 4 * static_cast<int64_t>(at::get_num_threads());
  int64_t per_task = num_kv_heads;
  while (per_task > 1 && num_rows * (num_kv_heads / per_task) < wanted_tasks) {
    int64_t smaller = per_task - 1;
    while (num_kv_heads % smaller != 0) --smaller;
    per_task = smaller;
  }
  return per_task;
}

at::Tensor paged_decode(const at::Tensor& query, const at::Tensor& key_pool,
                        const at::Tensor& value_pool, const at::Tensor& block_tables,
                        const at::Tensor& positions, int64_t window, double softmax_scale) {
  TORCH_CHECK(query.dim() == 3 && key_pool.dim() == 4, "query [B, H, D], pools [N, bs, KV, D]");
  TORCH_CHECK(query.device().is_cpu() && key_pool.device().is_cpu(), "CPU tensors only");
  TORCH_CHECK(query.stride(2) == 1, "query head_dim must be contiguous");
  TORCH_CHECK(key_pool.is_contiguous() && value_pool.is_contiguous(), "pools must be contiguous");
  TORCH_CHECK(key_pool.sizes() == value_pool.sizes(), "key and value pools differ in shape");
  TORCH_CHECK(query.scalar_type() == key_pool.scalar_type() &&
                  key_pool.scalar_type() == value_pool.scalar_type(),
              "query and pools must share a dtype");
  TORCH_CHECK(block_tables.scalar_type() == at::kLong && block_tables.is_contiguous() &&
                  block_tables.dim() == 2 && block_tables.size(0) == query.size(0),
              "block_tables [B, max_blocks] int64 contiguous");
  TORCH_CHECK(positions.scalar_type() == at::kLong && positions.is_contiguous() &&
                  positions.numel() == query.size(0),
              "positions [B] int64 contiguous");
  Geometry g{query.size(1),   key_pool.size(2), query.size(2), key_pool.size(1),
             block_tables.size(1), query.stride(0), query.stride(1), window,
             static_cast<float>(softmax_scale), 1};
  g.kv_heads_per_task = kv_heads_per_task(query.size(0), g.num_kv_heads);
  TORCH_CHECK(key_pool.size(3) == g.head_dim, "pool head_dim differs from the query's");
  TORCH_CHECK(g.num_heads % g.num_kv_heads == 0, "num_heads must be a multiple of num_kv_heads");
  at::Tensor out = at::empty({query.size(0), g.num_heads, g.head_dim}, query.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, query.scalar_type(), "paged_decode",
                                  [&] { run<scalar_t>(query, key_pool, value_pool, block_tables,
                                                      positions, g, out); });
  return out;
}

}  // namespace

TORCH_LIBRARY(iterserve_kernels, m) {
  m.def("paged_decode(Tensor query, Tensor key_pool, Tensor value_pool, Tensor block_tables, "
        "Tensor positions, int window, float softmax_scale) -> Tensor");
  m.impl("paged_decode", c10::DispatchKey::CPU, &paged_decode);
}
