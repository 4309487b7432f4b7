"""Batched paged attention: one FlexAttention call per layer for the whole
packed batch, K/V read in place from the pool through the block tables
(spec 0x04; the accelerator path, see docs/cuda.md).

The query is the packed batch [1, H, Q_tot, D]; the keys and values are the
whole pool viewed as one sequence of slots [1, KV, num_blocks * block_size, D]
(a view, nothing is gathered). Visibility is the same 0x04 predicate as
model/attention.py, evaluated per (query row, pool slot) by `mask_mod`:

    segment s = segment_of_row[q], position p = positions[q]
    slot k lies in physical block b = k // block_size at offset k % block_size
    j = block_logical[b]: the logical index of b in the tables of this step
    visible iff tables[s, j] == b           (b is in s's own block table)
            and j * block_size + offset <= p (causal; > p - W for a window)

A physical block has one logical index in every table that holds it (a
prefix-cache block is shared only at the position its hash chain names;
`FlexLayout.build` checks it and raises otherwise), so `block_logical` is a
single [num_blocks] vector rather than a table per request.

Sparsity: the packed rows are cut into query tiles of QUERY_TILE_ROWS rows;
tile t lists (`kv_indices`) the deduplicated union of the blocks that the
segments overlapping it need up to the tile's last position. A compiled
kernel visits only those blocks and applies `mask_mod` inside them, so a
decode row costs its own blocks and a prefill tile stops at its causal
frontier. A block listed twice would be counted twice by the kernel, hence
the deduplication. The eager path (CPU) ignores the sparsity and evaluates
`mask_mod` densely, which is exact on its own; tests/model check the tile
lists against the reference separately.

Everything here is built on the host with numpy from the packed batch's
arrays, once per step, and reaches the device in the packed batch's single
upload (model/staging.py); there is no per-request Python.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from iterserve.records.kv_abi import blocks_for

Window = int | None

#: Rows per query tile of the block mask (the kernel's BLOCK_M divides it).
QUERY_TILE_ROWS = 16

FlexCall = Callable[..., torch.Tensor]


@dataclass(frozen=True, slots=True)
class FlexHostLayout:
    """The numpy arrays of one step's layout (int32), before upload.

    segment_of_row, positions: [num_tiles * QUERY_TILE_ROWS]; rows past the
    batch belong to segment 0 at position -1 and see nothing.
    tables: [N, max_num_blocks], -1 past each segment's own blocks.
    block_entries, block_logical_ids: the (physical block, logical index)
    pairs scattered into the device's [num_pool_blocks] `block_logical`.
    kv_num_blocks [num_tiles], kv_indices [num_tiles, max_listed]: the
    blocks each query tile visits (padding entries repeat 0, unread).
    """

    segment_of_row: np.ndarray
    positions: np.ndarray
    tables: np.ndarray
    block_entries: np.ndarray
    block_logical_ids: np.ndarray
    kv_num_blocks: np.ndarray
    kv_indices: np.ndarray

    def arrays(self) -> tuple[np.ndarray, ...]:
        return (self.segment_of_row, self.positions, self.tables, self.block_entries,
                self.block_logical_ids, self.kv_num_blocks, self.kv_indices)


def host_layout(query_lens: np.ndarray, starts: np.ndarray, tables: np.ndarray,
                num_blocks: np.ndarray, block_size: int) -> FlexHostLayout:
    """The layout of one packed batch: `query_lens`, `starts` [N], `tables`
    [N, width] (0-padded, as pack builds it), `num_blocks` [N] entries used."""
    num_segments = len(query_lens)
    offsets = np.zeros(num_segments + 1, np.int64)
    np.cumsum(query_lens, out=offsets[1:])
    num_rows = int(offsets[-1])
    num_tiles = -(-num_rows // QUERY_TILE_ROWS)
    padded_rows = num_tiles * QUERY_TILE_ROWS
    segment_of_row = np.zeros(padded_rows, np.int32)
    segment_of_row[:num_rows] = np.repeat(np.arange(num_segments), query_lens)
    positions = np.full(padded_rows, -1, np.int32)
    positions[:num_rows] = np.arange(num_rows) + (starts - offsets[:-1])[segment_of_row[:num_rows]]
    used = np.arange(tables.shape[1]) < num_blocks[:, None]
    entries, logical = tables[used], np.nonzero(used)[1]
    _check_one_logical_index(entries, logical)
    kv_num_blocks, kv_indices = _tile_block_lists(offsets, starts, tables, block_size)
    return FlexHostLayout(
        segment_of_row=segment_of_row, positions=positions,
        tables=np.where(used, tables, -1).astype(np.int32),
        block_entries=entries.astype(np.int32), block_logical_ids=logical.astype(np.int32),
        kv_num_blocks=kv_num_blocks, kv_indices=kv_indices)


def _check_one_logical_index(entries: np.ndarray, logical: np.ndarray) -> None:
    """Raise if a physical block sits at two logical indices in this step's tables."""
    seen = np.zeros(int(entries.max()) + 1, np.int64)
    seen[entries] = logical
    if not np.array_equal(seen[entries], logical):
        bad = int(entries[np.flatnonzero(seen[entries] != logical)[0]])
        raise ValueError(f"block {bad} appears at two logical indices; the batched "
                         "attention path needs one per block")


def _tile_block_lists(offsets: np.ndarray, starts: np.ndarray, tables: np.ndarray,
                      block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query tile, the sorted distinct blocks its rows may see (see module doc)."""
    first_tile = offsets[:-1] // QUERY_TILE_ROWS
    last_tile = (offsets[1:] - 1) // QUERY_TILE_ROWS
    tiles_per_segment = last_tile - first_tile + 1
    pair_segment = np.repeat(np.arange(len(starts)), tiles_per_segment)
    pair_base = np.repeat(np.cumsum(tiles_per_segment) - tiles_per_segment, tiles_per_segment)
    pair_tile = first_tile[pair_segment] + np.arange(len(pair_segment)) - pair_base
    # the segment's last row inside the tile, hence the blocks it needs there
    last_row = np.minimum(offsets[pair_segment + 1], (pair_tile + 1) * QUERY_TILE_ROWS) - 1
    last_position = starts[pair_segment] + last_row - offsets[pair_segment]
    pair_needs = blocks_for(last_position + 1, block_size)
    entry_pair = np.repeat(np.arange(len(pair_segment)), pair_needs)
    entry_logical = np.arange(len(entry_pair)) - np.repeat(np.cumsum(pair_needs) - pair_needs,
                                                           pair_needs)
    entry_block = tables[pair_segment[entry_pair], entry_logical]
    num_pool_ids = int(entry_block.max()) + 1
    keys = np.unique(pair_tile[entry_pair] * num_pool_ids + entry_block)
    key_tile, key_block = keys // num_pool_ids, keys % num_pool_ids
    num_tiles = int(last_tile[-1]) + 1
    counts = np.bincount(key_tile, minlength=num_tiles)
    kv_indices = np.zeros((num_tiles, int(counts.max())), np.int32)
    kv_indices[np.arange(kv_indices.shape[1]) < counts[:, None]] = key_block
    return counts.astype(np.int32), kv_indices


@dataclass(frozen=True, slots=True, eq=False)
class FlexLayout:
    """One step's layout on the device (see FlexHostLayout); shared by every layer."""

    segment_of_row: torch.Tensor
    positions: torch.Tensor
    tables: torch.Tensor
    block_logical: torch.Tensor  # [num_pool_blocks]
    kv_num_blocks: torch.Tensor
    kv_indices: torch.Tensor
    num_rows: int
    block_size: int
    #: block masks built so far, by (pool slots, window): one per window per forward
    masks: dict[tuple[int, Window], BlockMask] = field(default_factory=dict)

    @classmethod
    def from_uploaded(cls, host: FlexHostLayout, uploaded: list[torch.Tensor], num_rows: int,
                      num_pool_blocks: int, block_size: int) -> FlexLayout:
        """The layout from its arrays already on the device, in `host.arrays()` order."""
        segment_of_row, positions, tables, entries, logical, num_listed, indices = uploaded
        block_logical = torch.zeros(num_pool_blocks, dtype=torch.int32, device=tables.device)
        block_logical.index_copy_(0, entries.long(), logical)
        return cls(segment_of_row, positions, tables, block_logical, num_listed, indices,
                   num_rows, block_size)

    def block_mask(self, num_slots: int, window: Window) -> BlockMask:
        """The BlockMask of one layer's window over a pool of `num_slots` slots
        (built by the first layer that asks, then shared)."""
        mask = self.masks.get((num_slots, window))
        if mask is None:
            mask = self.masks[num_slots, window] = self._block_mask(num_slots, window)
        return mask

    def _block_mask(self, num_slots: int, window: Window) -> BlockMask:
        num_tiles = self.kv_num_blocks.shape[0]
        return BlockMask.from_kv_blocks(
            self.kv_num_blocks[None, None], self.kv_indices[None, None],
            BLOCK_SIZE=(QUERY_TILE_ROWS, self.block_size), mask_mod=self.mask_mod(window),
            seq_lengths=(num_tiles * QUERY_TILE_ROWS, num_slots), compute_q_blocks=False)

    def mask_mod(self, window: Window) -> Callable[..., torch.Tensor]:
        """The 0x04 visibility of (query row, pool slot), see the module docstring."""
        segment_of_row, positions, tables = self.segment_of_row, self.positions, self.tables
        block_logical, block_size = self.block_logical, self.block_size

        def visible(batch: torch.Tensor, head: torch.Tensor, row: torch.Tensor,
                    slot: torch.Tensor) -> torch.Tensor:
            block = slot // block_size
            logical = block_logical[block]
            key_position = logical * block_size + slot % block_size
            position = positions[row]
            seen = (tables[segment_of_row[row], logical] == block) & (key_position <= position)
            if window is not None:
                seen = seen & (key_position > position - window)
            return seen

        return visible


def softcap_score(cap: float) -> Callable[..., torch.Tensor]:
    """score_mod for Gemma 2's attention soft cap: cap * tanh(score / cap)."""
    def capped(score: torch.Tensor, batch: torch.Tensor, head: torch.Tensor,
               row: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        return cap * torch.tanh(score / cap)

    return capped


def batched_paged_attention(query: torch.Tensor, key_pool: torch.Tensor,
                            value_pool: torch.Tensor, layout: FlexLayout, window: Window,
                            scale: float | None = None, softcap: float | None = None,
                            attend: FlexCall = flex_attention,
                            kernel_options: dict[str, int | bool] | None = None
                            ) -> torch.Tensor:
    """Attend query [Q, H, D] over the pools in one call; returns [Q, H * D].
    The batch's new K/V rows must already be written into the pools.
    `attend`: flex_attention itself (eager) or its compiled form."""
    num_rows, num_heads, head_dim = query.shape
    num_slots = key_pool.shape[0] * key_pool.shape[1]
    num_kv_heads = key_pool.shape[2]
    padded_rows = layout.segment_of_row.shape[0]
    if padded_rows != num_rows:  # whole query tiles: padding rows see nothing and are cut
        query = torch.nn.functional.pad(query, (0, 0, 0, 0, 0, padded_rows - num_rows))
    keys = key_pool.view(1, num_slots, num_kv_heads, head_dim).transpose(1, 2)
    values = value_pool.view(1, num_slots, num_kv_heads, head_dim).transpose(1, 2)
    out = attend(query.transpose(0, 1)[None], keys, values,
                 score_mod=None if softcap is None else softcap_score(softcap),
                 block_mask=layout.block_mask(num_slots, window), scale=scale, enable_gqa=True,
                 kernel_options=kernel_options)
    return out[0, :, :num_rows].transpose(0, 1).reshape(num_rows, num_heads * head_dim)
