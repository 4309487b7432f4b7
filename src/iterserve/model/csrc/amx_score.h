// Attention scores of bf16 keys on the AMX tile unit (paged_decode.cpp's
// score step for bf16 heads of a multiple of 32 elements and n_q <= 16).
//
// For 16 keys at a time: S[16 keys, n_q] = K[16, D] . Q^T[D, n_q], one
// TDPBF16PS per 32 elements of the head: the A tile is the 16 key rows as
// stored (read in place when they are consecutive rows of one block, else
// copied into a 16-row buffer), the B tile the queries in pair-interleaved
// (VNNI) order, built once per call, the C tile the 16 x n_q float32 sums.
// Products of two bf16 are exact and the tile unit sums them in float32, so
// the scores are the float32 dot products summed in another order. This keeps
// the vector units for the softmax and the value accumulation.
#pragma once

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512F__)
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#define ITERSERVE_HAS_AMX 1

namespace iterserve_amx {

constexpr int kKeys = 16;        // key rows per tile
constexpr int kPairs = 16;       // element pairs (32 bf16) per tile row
constexpr int kMaxQueries = 16;  // n_q columns of the B and C tiles
constexpr int kMaxChunks = 8;    // head_dim <= 256

// Whether Linux lets this thread use the tile registers (arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA; granted per process, asking
// again is a cheap no-op).
inline bool tiles_permitted() {
  constexpr int kReqXcompPerm = 0x1023, kXtileData = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
}

// Palette 1: tmm0, tmm1 = C [16 keys, 16 queries] float32; tmm2, tmm3 = A
// [16 keys, 32] bf16; tmm4 = B [16 pairs, 16 queries] (columns past n_q zero).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64};
  uint8_t rows[16] = {kKeys, kKeys, kKeys, kKeys, kPairs};
};

// The tile configuration loaded for one thread's run of tasks, released at its
// end (loading it per span costs more than the tiles save).
class TileSession {
 public:
  explicit TileSession(bool on) : on_(on) {
    if (on_) {
      const TileConfig config;
      _tile_loadconfig(&config);
    }
  }
  ~TileSession() {
    if (on_) _tile_release();
  }
  TileSession(const TileSession&) = delete;
  TileSession& operator=(const TileSession&) = delete;

 private:
  bool on_;
};

// An A tile's 16 key rows: where the first starts and the bytes between rows.
struct KeyRows {
  const c10::BFloat16* first;
  int64_t stride_bytes;
};

// The `rows` <= 16 key rows at `offsets`: in place when there are 16 of them,
// consecutive in the pool, else copied into `buffer` (the missing rows zero).
template <int C>
KeyRows key_rows(const c10::BFloat16* keys, const int64_t* offsets, int64_t rows,
                 int64_t row_stride, c10::BFloat16* buffer) {
  bool in_place = rows == kKeys;
  for (int64_t k = 1; in_place && k < kKeys; ++k)
    in_place = offsets[k] - offsets[k - 1] == row_stride;
  if (in_place) return {keys + offsets[0], row_stride * 2};
  constexpr int64_t d = 32 * C;
  for (int64_t k = 0; k < rows; ++k) std::memcpy(buffer + k * d, keys + offsets[k], d * 2);
  std::memset(static_cast<void*>(buffer + rows * d), 0, (kKeys - rows) * d * 2);
  return {buffer, d * 2};
}

// scores[i, q] = scale * (query_q . key_i) for the n key rows at `offsets`
// (elements from `keys`, rows `row_stride` elements apart within a block),
// queries [n_q, 32 * C] float32 holding bf16 values. fetch(i) is called once
// per key in order (the caller's prefetch of the next span). The calling thread
// holds a TileSession.
template <int C, typename Fetch>
void score_span(const c10::BFloat16* keys, const int64_t* offsets, int64_t n, int64_t n_q,
                const float* queries, float* scores, float scale, int64_t row_stride,
                const Fetch& fetch) {
  static_assert(C <= kMaxChunks);
  // B tiles, VNNI order: pairs[c][p][q] = elements 32c + 2p, 32c + 2p + 1 of query q.
  alignas(64) uint32_t pairs[C][kPairs][kMaxQueries] = {};
  const __m512i pair_rows = _mm512_mullo_epi32(
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
      _mm512_set1_epi32(kMaxQueries));
  for (int64_t q = 0; q < n_q; ++q)
    for (int c = 0; c < C; ++c) {
      const float* e = queries + q * 32 * C + 32 * c;
      const __m512bh row = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(e + 16), _mm512_loadu_ps(e));
      _mm512_i32scatter_epi32(&pairs[c][0][q], pair_rows, (__m512i)row, 4);
    }
  alignas(64) c10::BFloat16 copied[2][kKeys * 32 * C];  // rows not in place
  alignas(64) float sums[2][kKeys * kMaxQueries];
  const int64_t pair_stride = kMaxQueries * 4;
  // Two groups of 16 keys per step (tmm0/tmm1 accumulate them, tmm2/tmm3 hold
  // their key rows, tmm4 the queries), so that one group's loads overlap the
  // other's products.
  for (int64_t i = 0; i < n; i += 2 * kKeys) {
    const int64_t rows0 = std::min<int64_t>(kKeys, n - i);
    const int64_t rows1 = std::clamp<int64_t>(n - i - kKeys, 0, kKeys);
    for (int64_t k = 0; k < rows0 + rows1; ++k) fetch(i + k);
    const KeyRows a0 = key_rows<C>(keys, offsets + i, rows0, row_stride, copied[0]);
    _tile_zero(0);
    if (rows1 == 0) {
      for (int c = 0; c < C; ++c) {
        _tile_loadd(2, a0.first + 32 * c, a0.stride_bytes);
        _tile_loadd(4, pairs[c], pair_stride);
        _tile_dpbf16ps(0, 2, 4);
      }
    } else {
      const KeyRows a1 = key_rows<C>(keys, offsets + i + kKeys, rows1, row_stride, copied[1]);
      _tile_zero(1);
      for (int c = 0; c < C; ++c) {
        _tile_loadd(2, a0.first + 32 * c, a0.stride_bytes);
        _tile_loadd(3, a1.first + 32 * c, a1.stride_bytes);
        _tile_loadd(4, pairs[c], pair_stride);
        _tile_dpbf16ps(0, 2, 4);
        _tile_dpbf16ps(1, 3, 4);
      }
      _tile_stored(1, sums[1], kMaxQueries * 4);
    }
    _tile_stored(0, sums[0], kMaxQueries * 4);
    const __m512 factor = _mm512_set1_ps(scale);
    const __mmask16 live = static_cast<__mmask16>((1u << n_q) - 1);
    for (int64_t k = 0; k < rows0 + rows1; ++k)
      _mm512_mask_storeu_ps(scores + (i + k) * n_q, live,
                            _mm512_mul_ps(_mm512_load_ps(sums[k / kKeys] + k % kKeys * kMaxQueries),
                                          factor));
  }
}

}  // namespace iterserve_amx
#endif
