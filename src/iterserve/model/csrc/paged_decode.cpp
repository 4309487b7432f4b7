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

// Widened loads: a bf16/half/float row as float32, 16 lanes at a time where
// the CPU has AVX-512 (the build uses -march=native), else a plain loop.
inline float to_float(float x) { return x; }
inline float to_float(double x) { return static_cast<float>(x); }
inline float to_float(c10::BFloat16 x) { return static_cast<float>(x); }
inline float to_float(c10::Half x) { return static_cast<float>(x); }

#ifdef __AVX512F__
constexpr int64_t kLanes = 16;
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const c10::BFloat16* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline __m512 load16(const c10::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
template <typename T>
constexpr bool kVector = !std::is_same_v<T, double>;
#else
constexpr int64_t kLanes = 0;
template <typename T>
constexpr bool kVector = false;
#endif

// q (float32, n) . k (T, n), float32 accumulation.
template <typename T>
inline float dot(const float* q, const T* k, int64_t n) {
#ifdef __AVX512F__
  if constexpr (kVector<T>) {
    if (n % kLanes == 0) {
      __m512 sum = _mm512_setzero_ps();
      for (int64_t i = 0; i < n; i += kLanes) sum = _mm512_fmadd_ps(load16(q + i), load16(k + i), sum);
      return _mm512_reduce_add_ps(sum);
    }
  }
#endif
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) sum += q[i] * to_float(k[i]);
  return sum;
}

// acc (float32, n) += weight * v (T, n).
template <typename T>
inline void axpy(float weight, const T* v, float* acc, int64_t n) {
#ifdef __AVX512F__
  if constexpr (kVector<T>) {
    if (n % kLanes == 0) {
      const __m512 w = _mm512_set1_ps(weight);
      for (int64_t i = 0; i < n; i += kLanes)
        _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(w, load16(v + i), _mm512_loadu_ps(acc + i)));
      return;
    }
  }
#endif
  for (int64_t i = 0; i < n; ++i) acc[i] += weight * to_float(v[i]);
}

inline void scale(float alpha, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

struct Geometry {
  int64_t num_heads, num_kv_heads, head_dim, block_size, max_blocks;
  int64_t query_row_stride, query_head_stride;
  int64_t window;  // 0: no window
  float softmax_scale;
  int64_t kv_heads_per_task;  // a task: one sequence, this many consecutive kv heads
};

// Scratch of one task, per query head of its kv heads: the scaled query, the
// output accumulator, one block of scores, the running max and sum.
struct Scratch {
  std::vector<float> query, acc, scores, running_max, running_sum;
  Scratch(const Geometry& g, int64_t num_query_heads)
      : query(num_query_heads * g.head_dim), acc(num_query_heads * g.head_dim),
        scores(num_query_heads * g.block_size), running_max(num_query_heads),
        running_sum(num_query_heads) {}
};

// Keys [first, last) of one block for kv heads [kv_begin, kv_begin + kv_heads_per_task):
// scores, the streaming-softmax update, then V. Rows are read in pool order, so
// a block is one contiguous sweep when a task covers all kv heads.
template <typename T>
void attend_block(const T* key_pool, const T* value_pool, const Geometry& g, int64_t block,
                  int64_t kv_begin, int64_t first, int64_t last, Scratch& s) {
  const int64_t d = g.head_dim, n = last - first, group = g.num_heads / g.num_kv_heads;
  const int64_t num_query_heads = g.kv_heads_per_task * group;
  const int64_t row_stride = g.num_kv_heads * d;
  const int64_t base = (block * g.block_size + first) * row_stride + kv_begin * d;
  for (int64_t i = 0; i < n; ++i) {
    const T* row = key_pool + base + i * row_stride;
    for (int64_t h = 0, q = 0; h < g.kv_heads_per_task; ++h)
      for (int64_t j = 0; j < group; ++j, ++q)
        s.scores[q * g.block_size + i] = dot(s.query.data() + q * d, row + h * d, d);
  }
  for (int64_t q = 0; q < num_query_heads; ++q) {
    float* scores = s.scores.data() + q * g.block_size;
    const float new_max = std::max(s.running_max[q], *std::max_element(scores, scores + n));
    const float correction = std::exp(s.running_max[q] - new_max);
    float sum = 0.f;
    for (int64_t i = 0; i < n; ++i) {
      scores[i] = std::exp(scores[i] - new_max);
      sum += scores[i];
    }
    s.running_sum[q] = s.running_sum[q] * correction + sum;
    s.running_max[q] = new_max;
    if (correction != 1.f) scale(correction, s.acc.data() + q * d, d);
  }
  for (int64_t i = 0; i < n; ++i) {
    const T* row = value_pool + base + i * row_stride;
    for (int64_t h = 0, q = 0; h < g.kv_heads_per_task; ++h)
      for (int64_t j = 0; j < group; ++j, ++q)
        axpy(s.scores[q * g.block_size + i], row + h * d, s.acc.data() + q * d, d);
  }
}

// One task: keys [lo, hi) of one sequence through its block table.
template <typename T>
void attend_task(const T* query, const T* key_pool, const T* value_pool, const int64_t* table,
                 int64_t position, int64_t kv_begin, const Geometry& g, T* out, Scratch& s) {
  const int64_t group = g.num_heads / g.num_kv_heads, d = g.head_dim;
  const int64_t num_query_heads = g.kv_heads_per_task * group, head_begin = kv_begin * group;
  const int64_t hi = position + 1;
  const int64_t lo = g.window > 0 ? std::max<int64_t>(0, hi - g.window) : 0;
  for (int64_t q = 0; q < num_query_heads; ++q) {
    const T* src = query + (head_begin + q) * g.query_head_stride;
    for (int64_t i = 0; i < d; ++i) s.query[q * d + i] = to_float(src[i]) * g.softmax_scale;
  }
  std::fill(s.acc.begin(), s.acc.end(), 0.f);
  std::fill(s.running_max.begin(), s.running_max.end(), -std::numeric_limits<float>::infinity());
  std::fill(s.running_sum.begin(), s.running_sum.end(), 0.f);
  for (int64_t start = lo; start < hi;) {
    const int64_t logical = start / g.block_size;
    const int64_t stop = std::min(hi, (logical + 1) * g.block_size);
    attend_block(key_pool, value_pool, g, table[logical], kv_begin,
                 start - logical * g.block_size, stop - logical * g.block_size, s);
    start = stop;
  }
  for (int64_t q = 0; q < num_query_heads; ++q) {
    const float inverse = 1.f / s.running_sum[q];
    T* dst = out + (head_begin + q) * d;
    for (int64_t i = 0; i < d; ++i) dst[i] = static_cast<T>(s.acc[q * d + i] * inverse);
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
  const int64_t group = g.num_heads / g.num_kv_heads;
  at::parallel_for(0, query.size(0) * splits, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch(g, g.kv_heads_per_task * group);
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
