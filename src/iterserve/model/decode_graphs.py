"""CUDA graphs for decode steps on the batched attention path.

A step whose segments are all single decode rows (each sampled) is padded to
a graph shape (rows, blocks per row) from a few buckets and replayed from a
CUDA graph captured for that shape: the step then costs one upload into the
graph's static input buffer and one replay, instead of a launch per kernel.
Graphs are captured lazily, the first time a shape is met, and cached; a
step outside every bucket (more rows or longer contexts than the largest,
a prefill chunk, a row that does not sample) runs eagerly.

Padding rows: token 0 at position 0, segment 0 with attention position -1
(they see nothing, model/batched_attention.py), a block table of -1, and
their K/V written to the executor's scratch block, one block past the pool
the block manager hands out. Their logits are cut off.

The static inputs of one shape are views of one device byte buffer; a step
writes its padded arrays into the staging buffer and copies them there in
one non-blocking copy (model/staging.py), then replays. On the CPU nothing is
captured: `run` executes the same padded forward eagerly, which is how the
padding is tested without a GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from iterserve.model.batched_attention import QUERY_TILE_ROWS, FlexLayout, host_layout
from iterserve.model.kv_cache import PagedKVCache
from iterserve.model.packing import HostPack, PackedBatch
from iterserve.model.staging import ALIGN_BYTES, HostStaging, aligned_offsets, typed_view

if TYPE_CHECKING:
    from iterserve.model.llama import PackedCausalLM

logger = logging.getLogger(__name__)

#: Row buckets: a decode batch runs at the smallest bucket that holds it.
BATCH_ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Blocks-per-row buckets (the longest row's table, padded): powers of two from this ...
MIN_BLOCKS_PER_ROW = 8
#: ... up to this (with 16-row blocks, 8192 positions); longer contexts run eagerly.
MAX_BLOCKS_PER_ROW = 512
#: At most this many captured graphs (each holds its own static buffers).
MAX_GRAPHS = 24


@dataclass(frozen=True, slots=True, order=True)
class GraphShape:
    """A padded decode step: `num_rows` rows, block tables `blocks_per_row` wide."""

    num_rows: int
    blocks_per_row: int

    @property
    def num_tiles(self) -> int:
        return -(-self.num_rows // QUERY_TILE_ROWS)

    @property
    def listed_per_tile(self) -> int:
        """kv_indices width: every row of a tile may list all its blocks."""
        return min(self.num_rows, QUERY_TILE_ROWS) * self.blocks_per_row


def graph_shape(num_rows: int, max_blocks: int, max_batch_rows: int = BATCH_ROW_BUCKETS[-1],
                max_blocks_per_row: int = MAX_BLOCKS_PER_ROW) -> GraphShape | None:
    """The smallest bucket holding `num_rows` rows whose longest table has
    `max_blocks` blocks; None when no bucket does (the step runs eagerly)."""
    rows = next((b for b in BATCH_ROW_BUCKETS if b >= num_rows and b <= max_batch_rows), None)
    if rows is None or max_blocks > max_blocks_per_row or num_rows < 1:
        return None
    blocks = MIN_BLOCKS_PER_ROW
    while blocks < max_blocks:
        blocks *= 2
    return GraphShape(rows, min(blocks, max_blocks_per_row))


def is_decode_only(host: HostPack) -> bool:
    """Every segment is one row that samples: the steps the graphs replay."""
    return bool((host.query_lens == 1).all()) and len(host.sample_segments) == len(host.query_lens)


def padded_arrays(host: HostPack, shape: GraphShape, scratch_block: int,
                  num_pool_blocks: int) -> tuple[np.ndarray, ...]:
    """The decode step's arrays padded to `shape`, in `static_inputs` order:
    token_ids, positions, slot_mapping, then the attention layout's
    segment_of_row, positions, tables, block entries, logical ids,
    kv_num_blocks, kv_indices (see the module docstring for padding rows)."""
    num_rows, width = len(host.query_lens), shape.blocks_per_row
    layout = host_layout(host.query_lens, host.context_lens, host.block_tables,
                         host.num_blocks, host.block_size)

    def padded(values: np.ndarray, size: tuple[int, ...], fill: int) -> np.ndarray:
        out = np.full(size, fill, values.dtype)
        out[tuple(slice(0, n) for n in values.shape)] = values
        return out

    rows, tiles = shape.num_rows, shape.num_tiles
    return (
        padded(host.token_ids, (rows,), 0),
        padded(host.positions, (rows,), 0),
        padded(host.slot_mapping, (rows,), scratch_block * host.block_size),
        padded(layout.segment_of_row[:num_rows], (tiles * QUERY_TILE_ROWS,), 0),
        padded(layout.positions[:num_rows], (tiles * QUERY_TILE_ROWS,), -1),
        padded(layout.tables, (rows, width), -1),
        padded(layout.block_entries, (rows * width,), num_pool_blocks),
        padded(layout.block_logical_ids, (rows * width,), 0),
        padded(layout.kv_num_blocks, (tiles,), 0),
        padded(layout.kv_indices, (tiles, shape.listed_per_tile), 0),
    )


@dataclass(slots=True)
class _Captured:
    """One shape's static device inputs, its output and (on CUDA) its graph."""

    device_bytes: torch.Tensor
    inputs: list[torch.Tensor]
    offsets: list[int]
    logits: torch.Tensor | None = None
    graph: torch.cuda.CUDAGraph | None = None


Forward = Callable[[list[torch.Tensor], GraphShape], torch.Tensor]


class DecodeGraphs:
    """The captured decode graphs of one model and cache, by shape (lazy, cached)."""

    def __init__(self, forward: Forward, cache: PagedKVCache, scratch_block: int,
                 staging: HostStaging, vocab_size: int, capture: bool | None = None,
                 max_batch_rows: int = BATCH_ROW_BUCKETS[-1]) -> None:
        """`forward(static_inputs, shape)` runs the model on the padded inputs
        and returns float32 logits [shape.num_rows, V]; `scratch_block`:
        a block of `cache` no request owns. `capture`: record CUDA graphs
        (default: on a CUDA device only)."""
        device = cache.key_pools[0].device
        self.capture = device.type == "cuda" if capture is None else capture
        if self.capture and device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        if not 0 <= scratch_block < cache.num_blocks:
            raise ValueError(f"scratch block {scratch_block} outside the pool")
        self._forward = forward
        self._cache = cache
        self._device = device
        self._staging = staging
        self.scratch_block = scratch_block
        self.vocab_size = vocab_size
        self.max_batch_rows = max_batch_rows
        self._captured: dict[GraphShape, _Captured] = {}
        self._pool: Any = None  # the memory pool all graphs share (CUDA)
        self.num_replays = 0  # steps run from the padded static inputs (replayed on CUDA)
        self.num_eager_fallbacks = 0
        self.failure: str | None = None  # why capture failed; then no graph is tried again

    @property
    def shapes(self) -> tuple[GraphShape, ...]:
        return tuple(sorted(self._captured))

    def run(self, host: HostPack) -> torch.Tensor | None:
        """Logits [n, V] of a decode-only step from its graph; None when the
        step has no graph shape (the caller runs it eagerly)."""
        shape = self.shape_for(host)
        if shape is None:
            self.num_eager_fallbacks += 1
            return None
        captured = self._captured.get(shape) or self._prepare(shape)
        if captured is None:
            self.num_eager_fallbacks += 1
            return None
        self._check(host)
        arrays = padded_arrays(host, shape, self.scratch_block, self._cache.num_blocks)
        self._staging.upload_into(arrays, captured.device_bytes)
        if captured.graph is None:
            logits = self._forward(captured.inputs, shape)
        else:
            captured.graph.replay()
            assert captured.logits is not None
            logits = captured.logits
        self.num_replays += 1
        return logits[: len(host.query_lens)]

    def shape_for(self, host: HostPack) -> GraphShape | None:
        if not is_decode_only(host):
            return None
        return graph_shape(len(host.query_lens), int(host.num_blocks.max()), self.max_batch_rows)

    def _check(self, host: HostPack) -> None:
        """The model's bounds checks (a replay reads ids unchecked; out of
        range on CUDA would be a device assert)."""
        if host.max_block_id >= self._cache.num_blocks:
            raise ValueError(f"block id {host.max_block_id} >= cache num_blocks "
                             f"{self._cache.num_blocks}")
        if int(host.token_ids.max()) >= self.vocab_size:
            raise ValueError(f"token id {int(host.token_ids.max())} >= vocab_size "
                             f"{self.vocab_size}")

    def _prepare(self, shape: GraphShape) -> _Captured | None:
        """Allocate the shape's static inputs and capture its graph."""
        if len(self._captured) >= MAX_GRAPHS or self.failure is not None:
            return None
        idle = idle_arrays(shape, self.scratch_block * self._cache.block_size,
                           self._cache.num_blocks)
        offsets = aligned_offsets(idle)
        device_bytes = torch.zeros(offsets[-1] + ALIGN_BYTES, dtype=torch.uint8,
                                   device=self._device)
        inputs = [typed_view(device_bytes, begin, array)
                  for array, begin in zip(idle, offsets, strict=False)]
        self._staging.upload_into(idle, device_bytes)
        captured = _Captured(device_bytes, inputs, offsets)
        if self.capture:
            try:
                self._record(captured, shape)
            except Exception as error:  # graphs are an optimisation: the step runs eagerly
                self.failure = f"{type(error).__name__}: {error}"
                logger.warning("decode graph capture failed for %s (%s); decode steps run "
                               "eagerly from now on", shape, self.failure)
                return None
        self._captured[shape] = captured
        return captured

    def _record(self, captured: _Captured, shape: GraphShape) -> None:
        """Warm up on a side stream (compiles the kernels), then capture; the
        static inputs hold idle_arrays meanwhile."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._forward(captured.inputs, shape)  # the padding rows write the scratch block only
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self._pool):  # graphs replay one at a time: one pool
            captured.logits = self._forward(captured.inputs, shape)
        captured.graph = graph
        logger.info("captured a decode graph for %d rows x %d blocks", shape.num_rows,
                    shape.blocks_per_row)


def idle_arrays(shape: GraphShape, scratch_slot: int, num_pool_blocks: int
                ) -> tuple[np.ndarray, ...]:
    """A padded step with no real row (see padded_arrays): what the static
    inputs hold while a graph is warmed up and captured, so that the capture
    writes the scratch block only."""
    rows, tiles, width = shape.num_rows, shape.num_tiles, shape.blocks_per_row
    return (np.zeros(rows, np.int64), np.zeros(rows, np.int64),
            np.full(rows, scratch_slot, np.int64),
            np.zeros(tiles * QUERY_TILE_ROWS, np.int32),
            np.full(tiles * QUERY_TILE_ROWS, -1, np.int32),
            np.full((rows, width), -1, np.int32),
            np.full(rows * width, num_pool_blocks, np.int32),
            np.zeros(rows * width, np.int32), np.zeros(tiles, np.int32),
            np.zeros((tiles, shape.listed_per_tile), np.int32))


def static_layout(inputs: list[torch.Tensor], shape: GraphShape, num_pool_blocks: int,
                  block_size: int) -> FlexLayout:
    """The attention layout over a shape's static inputs (built inside the
    graph: its zero-fill and scatter are recorded with the forward)."""
    layout_inputs = inputs[3:]
    entries = layout_inputs[3]
    logical = layout_inputs[4]
    block_logical = torch.zeros(num_pool_blocks + 1, dtype=torch.int32, device=entries.device)
    block_logical.index_copy_(0, entries.long(), logical)
    return FlexLayout(layout_inputs[0], layout_inputs[1], layout_inputs[2], block_logical,
                      layout_inputs[5], layout_inputs[6], shape.num_rows, block_size)


def static_forward(model: PackedCausalLM, cache: PagedKVCache) -> Forward:
    """`model`'s forward over a shape's static inputs (what a graph records)."""
    block_size = cache.block_size

    def forward(inputs: list[torch.Tensor], shape: GraphShape) -> torch.Tensor:
        token_ids, positions, slots = inputs[:3]
        rows = torch.arange(shape.num_rows, device=token_ids.device)
        layout = static_layout(inputs, shape, cache.num_blocks, block_size)
        batch = PackedBatch(  # host fields: checked by DecodeGraphs.run before the upload
            token_ids=token_ids, positions=positions,
            request_offsets=torch.arange(shape.num_rows + 1, device=token_ids.device),
            block_tables=layout.tables, slot_mapping=slots, context_lens=positions,
            sample_rows=rows, query_lens=(1,) * shape.num_rows, starts=(0,) * shape.num_rows,
            num_blocks=(1,) * shape.num_rows, sample_segments=tuple(range(shape.num_rows)),
            block_size=block_size, max_block_id=0, max_token_id=0, flex=layout)
        return model.forward(batch, cache)

    return forward
