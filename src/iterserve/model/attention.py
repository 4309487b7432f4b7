"""Request-local attention over the paged cache (spec 0x04, 0x09).

Visibility is exactly the spec predicate: packed row r of segment i at
position p sees key position u iff the key belongs to the same segment's
request (it is read through that segment's own block table) and u <= p, and,
for a sliding-window layer with window W, u > p - W. New K/V rows are written
into the pool before attention, so a segment's keys are always the pool rows
[0, end) of its block table: committed history [0, start) plus its own
current rows, which is the chunked-prefill union of 0x09.

Launch structure (one valid realisation; 0x04 leaves it free):
- with the native kernel (`in_place`, see model.kernels) all single-row
  segments are attended in one call per layer that walks each block table
  over the pool in place: nothing is gathered, padded or masked. With
  `chunks_in_place` the multi-row chunks go to the same call (the whole batch,
  one call per layer): the model asks for it where the kernel runs chunks on
  the AMX tile unit (bf16, `chunk_tiles`), where it beats one SDPA call per
  chunk (benchmarks/bench_step_ab.py); elsewhere the kernel's vector dot
  products lose to SDPA's GEMMs and chunks stay below;
- otherwise the single-row segments (decode rows, one-token chunks) are attended in a
  few padded SDPA calls per layer: sorted by the blocks they need and split
  into at most MAX_DECODE_GROUPS groups whose longest row needs at most
  DECODE_GROUP_GROWTH times the blocks of its shortest, so the gathered
  padding stays bounded when context lengths spread (one group padded to the
  longest row would copy K/V bytes that no row needs; see
  decode_gather_bytes). Within a group block tables are gathered to
  [B, L, kv, d], the query heads of each kv head form one group, and a
  boolean mask hides padding and rows past each position;
- each multi-row segment gets its own SDPA call; a chunk starting at 0 with no
  binding window uses the current rows directly with `is_causal`.
The pools are zero-initialised and only ever receive finite rows, so masked
padding never injects NaN through 0 * V.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch._ops import _OpNamespace as OpNamespace

from iterserve.model.eager_attention import causal_mask, sdpa
from iterserve.model.packing import PackedBatch
from iterserve.records.kv_abi import blocks_for

Window = int | None

#: At most this many padded SDPA calls per layer for the single-row segments.
MAX_DECODE_GROUPS = 8
#: A group is cut once a row needs more than this many times the blocks of the
#: group's first (shortest) row ...
DECODE_GROUP_GROWTH = 1.25
#: ... and only if both sides keep at least this many rows (fewer rows save too
#: few bytes to pay for another gather + SDPA + scatter per layer).
MIN_DECODE_GROUP_ROWS = 6


@dataclass(frozen=True, slots=True, eq=False)
class DecodeRows:
    """All single-row segments of the batch, attended together."""

    rows: torch.Tensor  # [B] packed row of each single-row segment
    flat_block_ids: torch.Tensor  # [B * num_blocks] block table rows, padded, flattened
    num_blocks: int  # blocks gathered per row (the longest row's need)
    masks: Mapping[Window, torch.Tensor]  # window -> [B, 1, 1, num_blocks * block_size] (see _mask)
    covers_all_rows: bool  # rows == arange(Q_tot): output needs no scatter


@dataclass(frozen=True, slots=True, eq=False)
class InPlaceRows:
    """Segments for the in-place kernel (csrc/paged_decode.cpp), in its own row order."""

    ops: OpNamespace  # the loaded kernels (model.kernels.load_paged_decode)
    block_tables: torch.Tensor  # [S, max_num_blocks] int64, contiguous
    request_offsets: torch.Tensor  # [S + 1]: segment i owns kernel rows [o_i, o_{i+1})
    context_lens: torch.Tensor  # [S]: position of each segment's first row
    rows: torch.Tensor | None  # packed row of each kernel row; None: the whole batch, in order


@dataclass(frozen=True, slots=True, eq=False)
class ChunkRows:
    """One multi-row segment: rows [row_begin, row_end) at positions [start, start + q)."""

    row_begin: int
    row_end: int
    start: int
    block_ids: torch.Tensor  # [ceil(end / block_size)]
    masks: Mapping[Window, torch.Tensor | None]  # None: plain causal over current rows


@dataclass(frozen=True, slots=True, eq=False)
class AttentionMetadata:
    """Per-forward attention descriptors, shared by every layer."""

    decode_groups: tuple[DecodeRows, ...]
    chunks: tuple[ChunkRows, ...]
    block_size: int
    in_place: InPlaceRows | None = None  # set: decode_groups is empty

    @classmethod
    def build(cls, batch: PackedBatch, windows: Iterable[Window],
              max_decode_groups: int = MAX_DECODE_GROUPS,
              mask_dtype: torch.dtype | None = None,
              in_place: OpNamespace | None = None,
              chunks_in_place: bool = False) -> AttentionMetadata:
        """`mask_dtype`: masks are additive (0 / -inf) in this dtype, the
        query's, built once here; None keeps boolean masks, which SDPA
        converts on every call (three more aten ops per call and layer).
        `in_place`: the loaded kernels (model.kernels.load_paged_decode),
        which then attend the single-row segments, and the multi-row ones too
        with `chunks_in_place` (the model sets it where the kernel runs chunks
        on the AMX tile unit; the kernel's vector path for chunks is 2-3x
        slower than SDPA's GEMMs, gather included)."""
        if in_place is not None and chunks_in_place:
            rows = InPlaceRows(ops=in_place, block_tables=batch.block_tables.contiguous(),
                               request_offsets=batch.request_offsets,
                               context_lens=batch.context_lens, rows=None)
            return cls(decode_groups=(), chunks=(), block_size=batch.block_size, in_place=rows)
        distinct_windows = frozenset(windows)
        single = [i for i, q in enumerate(batch.query_lens) if q == 1]
        chunks = tuple(
            _chunk_rows(batch, i, distinct_windows, mask_dtype)
            for i, q in enumerate(batch.query_lens) if q > 1
        )
        if in_place is not None:
            return cls(decode_groups=(), chunks=chunks, block_size=batch.block_size,
                       in_place=_in_place_rows(in_place, batch, single) if single else None)
        groups = decode_groups(batch, single, max_decode_groups)
        decode = tuple(_decode_rows(batch, group, distinct_windows, mask_dtype)
                       for group in groups)
        return cls(decode_groups=decode, chunks=chunks, block_size=batch.block_size)

    def decode_gather_bytes(self, row_bytes: int) -> int:
        """K plus V bytes one layer gathers for the single-row segments (padding included)."""
        return sum(2 * len(g.rows) * g.num_blocks * self.block_size * row_bytes
                   for g in self.decode_groups)


def paged_attention(
    query: torch.Tensor,
    new_keys: torch.Tensor,
    new_values: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    metadata: AttentionMetadata,
    window: Window,
    scale: float | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Attend query [Q, H, D] request-locally; returns [Q, H * D].

    `new_keys`/`new_values` [Q, KV, D] must already be written into the pools.
    `scale`: the softmax scale (None: D ** -0.5). `softcap`: scores pass
    through cap * tanh(s / cap) before the mask (Gemma 2); the native kernel
    does not do it, so a soft-capped model builds its metadata without it.
    """
    if softcap is not None and metadata.in_place is not None:
        raise ValueError("attention soft-capping runs on the torch path only")
    num_rows, num_heads, head_dim = query.shape
    groups = metadata.decode_groups
    in_place = metadata.in_place
    if in_place is not None and in_place.rows is None:
        return _attend_in_place(query, key_pool, value_pool, in_place, window,
                                scale).view(num_rows, -1)
    if len(groups) == 1 and groups[0].covers_all_rows:
        return _attend_decode(query, key_pool, value_pool, groups[0], window, scale,
                              softcap).view(num_rows, -1)
    out = query.new_empty(num_rows, num_heads, head_dim)
    if in_place is not None and in_place.rows is not None:
        out.index_copy_(0, in_place.rows, _attend_in_place(
            query.index_select(0, in_place.rows), key_pool, value_pool, in_place, window, scale))
    for decode in groups:
        decoded = _attend_decode(
            query.index_select(0, decode.rows), key_pool, value_pool, decode, window, scale,
            softcap)
        out.index_copy_(0, decode.rows, decoded)
    for chunk in metadata.chunks:
        rows = slice(chunk.row_begin, chunk.row_end)
        out[rows] = _attend_chunk(
            query[rows], new_keys[rows], new_values[rows], key_pool, value_pool, chunk, window,
            scale, softcap)
    return out.view(num_rows, -1)


def _attend_decode(
    query: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    decode: DecodeRows,
    window: Window,
    scale: float | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """One SDPA call for all single-row segments.

    The G = H / KV query heads that share a kv head are presented to SDPA as G
    query rows of that kv head ([B, KV, G, D]), so each cached key is read once
    per kv head rather than once per query head. Query head h uses kv head
    h // G, the Hugging Face repeat_kv convention.
    """
    num_rows, num_heads, head_dim = query.shape
    num_kv_heads = key_pool.shape[2]
    keys = _gather_rows(key_pool, decode.flat_block_ids).view(num_rows, -1, num_kv_heads, head_dim)
    values = _gather_rows(value_pool, decode.flat_block_ids).view(
        num_rows, -1, num_kv_heads, head_dim
    )
    out = sdpa(
        query.reshape(num_rows, num_kv_heads, num_heads // num_kv_heads, head_dim),
        keys.transpose(1, 2),  # [B, KV, L, D]
        values.transpose(1, 2),
        decode.masks[window],  # [B, 1, 1, L], broadcast over kv heads and G rows
        scale, softcap,
    )
    return out.reshape(num_rows, num_heads, head_dim)


def _attend_in_place(
    query: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    rows: InPlaceRows,
    window: Window,
    scale: float | None = None,
) -> torch.Tensor:
    """[Q, H, D] through the native kernel, every segment in one call; same
    visibility and GQA head mapping as the torch path, softmax in float32."""
    if query.stride(2) != 1:
        query = query.contiguous()
    return rows.ops.paged_attention(
        query, key_pool, value_pool, rows.block_tables, rows.request_offsets,
        rows.context_lens, window or 0, query.shape[-1] ** -0.5 if scale is None else scale)


def _attend_chunk(
    query: torch.Tensor,
    new_keys: torch.Tensor,
    new_values: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    chunk: ChunkRows,
    window: Window,
    scale: float | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    mask = chunk.masks[window]
    if mask is None:
        keys, values = new_keys, new_values
    else:
        num_keys = chunk.start + query.shape[0]
        keys = _gather_rows(key_pool, chunk.block_ids).flatten(0, 1)[:num_keys]
        values = _gather_rows(value_pool, chunk.block_ids).flatten(0, 1)[:num_keys]
    num_heads, num_kv_heads = query.shape[1], keys.shape[1]
    query = query.transpose(0, 1).unsqueeze(0)  # [1, H, q, D]
    keys = keys.transpose(0, 1).unsqueeze(0)  # [1, KV, k, D]
    values = values.transpose(0, 1).unsqueeze(0)
    if softcap is None:
        out = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask,
                                             is_causal=mask is None, enable_gqa=True,
                                             scale=scale)
    else:  # the eager path: query head h uses kv head h // G (repeat_kv)
        repeats = num_heads // num_kv_heads
        causal = causal_mask(query.shape[2], query.device) if mask is None else mask
        out = sdpa(query, keys.repeat_interleave(repeats, dim=1),
                   values.repeat_interleave(repeats, dim=1), causal, scale, softcap)
    return out[0].transpose(0, 1)  # [q, H, D]


def _gather_rows(pool: torch.Tensor, block_ids: torch.Tensor) -> torch.Tensor:
    """[n, block_size, KV, D] copy of the named blocks.

    index_select on a 2-D view is a plain row memcpy on CPU, several times
    faster than fancy indexing or index_select on the 4-D pool.
    """
    rows = torch.index_select(pool.view(pool.shape[0], -1), 0, block_ids)
    return rows.view(-1, *pool.shape[1:])


def decode_groups(batch: PackedBatch, single: list[int], max_groups: int) -> list[list[int]]:
    """The single-row segments split into groups of similar block need (see the
    module docstring); one group, in segment order, when no cut pays."""
    if not single:
        return []
    block_size = batch.block_size
    need = {i: batch.starts[i] // block_size + 1 for i in single}
    ordered = sorted(single, key=need.__getitem__)
    groups: list[list[int]] = [[]]
    for position, segment in enumerate(ordered):
        group = groups[-1]
        rows_left = len(ordered) - position
        if (len(groups) < max_groups and len(group) >= MIN_DECODE_GROUP_ROWS
                and rows_left >= MIN_DECODE_GROUP_ROWS
                and need[segment] > DECODE_GROUP_GROWTH * need[group[0]]):
            groups.append([])
        groups[-1].append(segment)
    return groups if len(groups) > 1 else [single]


def _decode_rows(batch: PackedBatch, segments: list[int], windows: frozenset[Window],
                 mask_dtype: torch.dtype | None) -> DecodeRows:
    device = batch.token_ids.device
    block_size = batch.block_size
    num_blocks = max(batch.starts[i] // block_size + 1 for i in segments)
    covers_all = segments == list(range(batch.num_segments))
    index = torch.tensor(segments, dtype=torch.int64, device=device)
    tables = batch.block_tables if covers_all else batch.block_tables.index_select(0, index)
    positions = batch.context_lens if covers_all else batch.context_lens.index_select(0, index)
    rows = (
        batch.request_offsets[:-1] if covers_all else batch.request_offsets.index_select(0, index)
    )
    key_positions = torch.arange(num_blocks * block_size, device=device)
    masks = {
        window: _mask(_visible(positions[:, None], key_positions[None, :], window),
                      mask_dtype)[:, None, None, :]
        for window in windows
    }
    return DecodeRows(
        rows=rows,
        flat_block_ids=tables[:, :num_blocks].reshape(-1),
        num_blocks=num_blocks,
        masks=masks,
        covers_all_rows=covers_all,
    )


def _in_place_rows(ops: OpNamespace, batch: PackedBatch, single: list[int]) -> InPlaceRows:
    """The single-row segments `single` for the kernel: all of the batch (no
    scatter), or a selection whose kernel rows are 0..len(single)-1."""
    if len(single) == batch.num_segments:
        return InPlaceRows(ops=ops, block_tables=batch.block_tables.contiguous(),
                           request_offsets=batch.request_offsets,
                           context_lens=batch.context_lens, rows=None)
    index = torch.tensor(single, dtype=torch.int64, device=batch.token_ids.device)
    return InPlaceRows(
        ops=ops,
        block_tables=batch.block_tables.index_select(0, index),
        request_offsets=torch.arange(len(single) + 1, device=index.device),
        context_lens=batch.context_lens.index_select(0, index),
        rows=batch.request_offsets.index_select(0, index),
    )


def _chunk_rows(batch: PackedBatch, segment: int, windows: frozenset[Window],
                mask_dtype: torch.dtype | None) -> ChunkRows:
    device = batch.token_ids.device
    start, num_rows = batch.starts[segment], batch.query_lens[segment]
    end = start + num_rows
    row_begin = sum(batch.query_lens[:segment])
    query_positions = torch.arange(start, end, device=device)[:, None]
    key_positions = torch.arange(end, device=device)[None, :]
    masks: dict[Window, torch.Tensor | None] = {}
    for window in windows:
        is_plain_causal = start == 0 and (window is None or window >= num_rows)
        masks[window] = (
            None if is_plain_causal
            else _mask(_visible(query_positions, key_positions, window), mask_dtype)
        )
    return ChunkRows(
        row_begin=row_begin,
        row_end=row_begin + num_rows,
        start=start,
        block_ids=batch.block_tables[segment, : blocks_for(end, batch.block_size)],
        masks=masks,
    )


def _mask(visible: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """`visible` as SDPA's attn_mask: itself (bool), or 0 where visible and
    -inf elsewhere in `dtype`, which SDPA adds to the scores as the bool mask
    would be (every row sees at least its own key, so no row is all -inf)."""
    if dtype is None:
        return visible
    return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(
        ~visible, float("-inf"))


def _visible(
    query_positions: torch.Tensor, key_positions: torch.Tensor, window: Window
) -> torch.Tensor:
    """The 0x04 causal predicate u <= p, narrowed to u > p - W for a sliding window."""
    visible = key_positions <= query_positions
    if window is not None:
        visible &= key_positions > query_positions - window
    return visible
