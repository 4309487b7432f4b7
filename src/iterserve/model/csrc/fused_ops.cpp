// Element-wise steps of the decoder layer fused into one pass over each row,
// rounding exactly where the torch ops they replace round (so a bf16 model
// gives the torch path's values up to float32 summation order):
//
// fused_add_rms_norm(x, residual, weight, eps), both [N, D], in place:
//   residual := T(residual + x)                      (torch: hidden + x)
//   x := T(residual * rsqrt(mean(residual^2) + eps) * weight)
//                                                    (torch: F.rms_norm, float32 inside)
// silu_and_mul(gate_up [N, 2I]) -> [N, I]:
//   out := T(T(silu(gate)) * up)                     (torch: F.silu(gate) * up)
// rotary_in_place(x [Q, NH, D], cos [Q, D], signed_sin [Q, D]), in place:
//   x := T(T(x * cos) + swap_halves(x) * signed_sin) (torch: model.rope.apply_rotary)
//
// write_kv(key_pool, value_pool [N, B, KV, D], slots [Q], keys, values [Q, KV, D]):
//   pool row slots[q] := row q, for keys and values  (torch: two index_copy_)
//
// T is the tensor's dtype (float32, bfloat16, float16); arithmetic in float32.
//
// Rows are split over threads only past kMinParallelElements elements in all
// (parallel_grain; each thread then gets at least half of that): a decode
// batch's RMSNorm and RoPE rows run on the calling thread, its SiLU-and-mul
// rows (5,632 wide in the small preset) and a prefill step's rows split.
// For a few rows, waking a second thread costs more than the work it takes
// over, and more still on a loaded machine; wide or many rows repay it. The
// threshold is where the two measured level for these ops on the small
// preset's shapes (benchmarks/bench_fused_grain.py alternates builds call by
// call to re-measure it). write_kv likewise runs on the calling thread.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include "simd.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <type_traits>

namespace {

#ifdef __AVX512F__
using namespace iterserve_simd;
#endif

constexpr int64_t kMinParallelElements = int64_t{1} << 17;

// The rows per thread chunk for rows of `row_elements` elements each
// (ITERSERVE_FUSED_GRAIN_ROWS fixes it instead, for benchmarks/bench_fused_grain.py).
inline int64_t parallel_grain(int64_t row_elements) {
#ifdef ITERSERVE_FUSED_GRAIN_ROWS
  (void)row_elements;
  return ITERSERVE_FUSED_GRAIN_ROWS;
#else
  return std::max<int64_t>(1, kMinParallelElements / std::max<int64_t>(1, row_elements));
#endif
}

template <typename T>
inline T round_to(float x) { return static_cast<T>(x); }
template <typename T>
inline float rounded(float x) { return static_cast<float>(static_cast<T>(x)); }

#ifdef __AVX512F__
// float32 lanes back to bf16 with round-to-nearest-even, as c10's conversions round.
inline __m256i to_bf16(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i up = _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(up, 16));
}
inline void store16(float* p, __m512 v, __mmask16 mask) { _mm512_mask_storeu_ps(p, mask, v); }
inline void store16(c10::BFloat16* p, __m512 v, __mmask16 mask) {
  _mm256_mask_storeu_epi16(p, mask, to_bf16(v));
}
inline void store16(c10::Half* p, __m512 v, __mmask16 mask) {
  _mm256_mask_storeu_epi16(p, mask, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
template <typename T>
inline __m512 round16(__m512 v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, c10::BFloat16>) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(to_bf16(v)), 16));
  } else {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}
template <typename T>
constexpr bool kVector = !std::is_same_v<T, double>;

#else
template <typename T>
constexpr bool kVector = false;
#endif

template <typename T>
void add_rms_norm_row(T* x, T* residual, const T* weight, int64_t d, float eps) {
  float sum_squares = 0.f;
  int64_t e = 0;
#ifdef __AVX512F__
  if constexpr (kVector<T>) {
    __m512 squares = _mm512_setzero_ps();
    for (; e < d; e += 16) {
      const __mmask16 mask = tail_mask(d - e);
      const __m512 sum = round16<T>(_mm512_add_ps(load16(residual + e, mask), load16(x + e, mask)));
      store16(residual + e, sum, mask);
      squares = _mm512_fmadd_ps(sum, sum, squares);
    }
    sum_squares = _mm512_reduce_add_ps(squares);
  }
#endif
  for (; e < d; ++e) {
    const float sum = rounded<T>(static_cast<float>(residual[e]) + static_cast<float>(x[e]));
    residual[e] = round_to<T>(sum);
    sum_squares += sum * sum;
  }
  const float inverse_rms = 1.f / std::sqrt(sum_squares / static_cast<float>(d) + eps);
  e = 0;
#ifdef __AVX512F__
  if constexpr (kVector<T>) {
    const __m512 scale = _mm512_set1_ps(inverse_rms);
    for (; e < d; e += 16) {
      const __mmask16 mask = tail_mask(d - e);
      const __m512 normed = _mm512_mul_ps(load16(residual + e, mask), scale);
      store16(x + e, _mm512_mul_ps(normed, load16(weight + e, mask)), mask);
    }
  }
#endif
  for (; e < d; ++e) {
    const float normed = static_cast<float>(residual[e]) * inverse_rms;
    x[e] = round_to<T>(normed * static_cast<float>(weight[e]));
  }
}

template <typename T>
void silu_and_mul_row(const T* gate, const T* up, T* out, int64_t n) {
  int64_t e = 0;
#ifdef __AVX512F__
  if constexpr (kVector<T>) {
    const __m512 one = _mm512_set1_ps(1.f);
    for (; e < n; e += 16) {
      const __mmask16 mask = tail_mask(n - e);
      const __m512 g = load16(gate + e, mask);
      const __m512 denominator = _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), g)));
      const __m512 silu = round16<T>(_mm512_div_ps(g, denominator));
      store16(out + e, _mm512_mul_ps(silu, load16(up + e, mask)), mask);
    }
  }
#endif
  for (; e < n; ++e) {
    const float g = static_cast<float>(gate[e]);
    const float silu = rounded<T>(g / (1.f + std::exp(-g)));
    out[e] = round_to<T>(silu * static_cast<float>(up[e]));
  }
}

// One head of one row: both halves rotate together, from the values read before.
template <typename T>
void rotate_head(T* x, const T* cos, const T* sin, int64_t d) {
  const int64_t half = d / 2;
  int64_t e = 0;
#ifdef __AVX512F__
  if constexpr (kVector<T>) {
    for (; e < half; e += 16) {
      const __mmask16 mask = tail_mask(half - e);
      const __m512 a = load16(x + e, mask), b = load16(x + half + e, mask);
      const __m512 a_cos = round16<T>(_mm512_mul_ps(a, load16(cos + e, mask)));
      const __m512 b_cos = round16<T>(_mm512_mul_ps(b, load16(cos + half + e, mask)));
      store16(x + e, _mm512_add_ps(a_cos, _mm512_mul_ps(b, load16(sin + e, mask))), mask);
      store16(x + half + e, _mm512_add_ps(b_cos, _mm512_mul_ps(a, load16(sin + half + e, mask))),
              mask);
    }
  }
#endif
  for (; e < half; ++e) {
    const float a = static_cast<float>(x[e]), b = static_cast<float>(x[half + e]);
    x[e] = round_to<T>(rounded<T>(a * static_cast<float>(cos[e])) + b * static_cast<float>(sin[e]));
    x[half + e] = round_to<T>(rounded<T>(b * static_cast<float>(cos[half + e])) +
                              a * static_cast<float>(sin[half + e]));
  }
}

void check_rows(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.dim() == 2 && t.is_contiguous(), name,
              " must be a contiguous 2-D CPU tensor");
}

void fused_add_rms_norm(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                        double eps) {
  check_rows(x, "x");
  check_rows(residual, "residual");
  TORCH_CHECK(x.sizes() == residual.sizes(), "x and residual differ in shape");
  TORCH_CHECK(weight.dim() == 1 && weight.is_contiguous() && weight.size(0) == x.size(1),
              "weight [D] contiguous");
  TORCH_CHECK(x.scalar_type() == residual.scalar_type() && x.scalar_type() == weight.scalar_type(),
              "x, residual and weight must share a dtype");
  const int64_t d = x.size(1);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "fused_add_rms_norm", [&] {
    scalar_t* xs = x.mutable_data_ptr<scalar_t>();
    scalar_t* rs = residual.mutable_data_ptr<scalar_t>();
    const scalar_t* w = weight.const_data_ptr<scalar_t>();
    at::parallel_for(0, x.size(0), parallel_grain(d), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row)
        add_rms_norm_row(xs + row * d, rs + row * d, w, d, static_cast<float>(eps));
    });
  });
}

at::Tensor silu_and_mul(const at::Tensor& gate_up) {
  check_rows(gate_up, "gate_up");
  TORCH_CHECK(gate_up.size(1) % 2 == 0, "gate_up needs an even number of columns");
  const int64_t n = gate_up.size(1) / 2;
  at::Tensor out = at::empty({gate_up.size(0), n}, gate_up.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, gate_up.scalar_type(), "silu_and_mul", [&] {
    const scalar_t* in = gate_up.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, gate_up.size(0), parallel_grain(2 * n), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row)
        silu_and_mul_row(in + row * 2 * n, in + row * 2 * n + n, o + row * n, n);
    });
  });
  return out;
}

void rotary_in_place(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& signed_sin) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 3 && x.stride(2) == 1 && x.size(2) % 2 == 0,
              "x [Q, heads, D] on the CPU, D even and contiguous");
  const int64_t rows = x.size(0), heads = x.size(1), d = x.size(2);
  for (const at::Tensor* table : {&cos, &signed_sin})
    TORCH_CHECK(table->is_contiguous() && table->numel() == rows * d &&
                    table->scalar_type() == x.scalar_type(),
                "cos and signed_sin [Q, D] (or [Q, 1, D]) contiguous, in x's dtype");
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rotary_in_place", [&] {
    scalar_t* xs = x.mutable_data_ptr<scalar_t>();
    const scalar_t* c = cos.const_data_ptr<scalar_t>();
    const scalar_t* s = signed_sin.const_data_ptr<scalar_t>();
    const int64_t row_stride = x.stride(0), head_stride = x.stride(1);
    at::parallel_for(0, rows, parallel_grain(heads * d), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row)
        for (int64_t h = 0; h < heads; ++h)
          rotate_head(xs + row * row_stride + h * head_stride, c + row * d, s + row * d, d);
    });
  });
}

// One row's [KV, D] must be contiguous; rows may be strided (q and k share a row).
void check_kv_rows(const at::Tensor& t, const at::Tensor& pool, int64_t rows, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.dim() == 3 && t.size(0) == rows &&
                  t.size(1) == pool.size(2) && t.size(2) == pool.size(3) && t.stride(2) == 1 &&
                  t.stride(1) == t.size(2) && t.scalar_type() == pool.scalar_type(),
              name, " must be [Q, KV, D] rows in the pool's dtype, each row contiguous");
}

void write_kv(const at::Tensor& key_pool, const at::Tensor& value_pool, const at::Tensor& slots,
              const at::Tensor& keys, const at::Tensor& values) {
  for (const at::Tensor* pool : {&key_pool, &value_pool})
    TORCH_CHECK(pool->device().is_cpu() && pool->dim() == 4 && pool->is_contiguous() &&
                    pool->sizes() == key_pool.sizes() &&
                    pool->scalar_type() == key_pool.scalar_type(),
                "key_pool and value_pool must be alike contiguous [N, B, KV, D] CPU tensors");
  TORCH_CHECK(slots.device().is_cpu() && slots.dim() == 1 && slots.is_contiguous() &&
                  slots.scalar_type() == at::kLong,
              "slots must be a contiguous int64 vector");
  const int64_t rows = slots.size(0);
  check_kv_rows(keys, key_pool, rows, "keys");
  check_kv_rows(values, key_pool, rows, "values");
  const int64_t num_slots = key_pool.size(0) * key_pool.size(1);
  const int64_t row_bytes = key_pool.size(2) * key_pool.size(3) * key_pool.element_size();
  const int64_t* slot = slots.const_data_ptr<int64_t>();
  auto* key_base = static_cast<char*>(key_pool.data_ptr());
  auto* value_base = static_cast<char*>(value_pool.data_ptr());
  const auto* key_rows = static_cast<const char*>(keys.const_data_ptr());
  const auto* value_rows = static_cast<const char*>(values.const_data_ptr());
  const int64_t key_stride = keys.stride(0) * keys.element_size();
  const int64_t value_stride = values.stride(0) * values.element_size();
  for (int64_t q = 0; q < rows; ++q)
    TORCH_CHECK(slot[q] >= 0 && slot[q] < num_slots, "slot ", slot[q], " outside the pool's ",
                num_slots, " rows");
  // a few hundred bytes a row: one thread (see parallel_grain)
  for (int64_t q = 0; q < rows; ++q) {
    std::memcpy(key_base + slot[q] * row_bytes, key_rows + q * key_stride, row_bytes);
    std::memcpy(value_base + slot[q] * row_bytes, value_rows + q * value_stride, row_bytes);
  }
}

}  // namespace

#ifndef ITERSERVE_OPS
#define ITERSERVE_OPS iterserve_kernels
#endif

TORCH_LIBRARY_FRAGMENT(ITERSERVE_OPS, m) {
  m.def("fused_add_rms_norm(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps) -> ()");
  m.impl("fused_add_rms_norm", c10::DispatchKey::CPU, &fused_add_rms_norm);
  m.def("silu_and_mul(Tensor gate_up) -> Tensor");
  m.impl("silu_and_mul", c10::DispatchKey::CPU, &silu_and_mul);
  m.def("rotary_in_place(Tensor(a!) x, Tensor cos, Tensor signed_sin) -> ()");
  m.impl("rotary_in_place", c10::DispatchKey::CPU, &rotary_in_place);
  m.def("write_kv(Tensor(a!) key_pool, Tensor(b!) value_pool, Tensor slots, Tensor keys, "
        "Tensor values) -> ()");
  m.impl("write_kv", c10::DispatchKey::CPU, &write_kv);
}
