"""PackedBatch: the tensor form of one PackedIteration (spec 0x04).

Segment i contributes the legal interval [start_i, end_i) of one request
generation (0x01A). Its q_i = end_i - start_i token rows occupy the packed
half-open slice [o_i, o_{i+1}) with o_0 = 0 and o_{i+1} = o_i + q_i, in the
order the segments are given; packing never reorders or changes intervals.
Positions are request-local: row o_i + r has position start_i + r. The rows
[0, start_i) of the request are already committed in the paged cache and are
reached only through the segment's own block table, which is what keeps
attention request-local.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import chain
from typing import Protocol

import numpy as np
import torch

from iterserve.model.batched_attention import FlexLayout
from iterserve.records.frontier import WorkKind
from iterserve.records.kv_abi import blocks_for
from iterserve.records.plan import IterationPlan, WorkItem


class SegmentRows(Protocol):
    """What pack reads of a segment: SegmentSpec, or a caller's own record of
    the same fields (the executor's, already tuples of ints, skips
    SegmentSpec's per-element conversion). token_ids must not be empty."""

    @property
    def token_ids(self) -> Sequence[int]: ...

    @property
    def start(self) -> int: ...

    @property
    def block_ids(self) -> Sequence[int]: ...

    @property
    def sample(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class SegmentSpec:
    """One request's rows in an iteration.

    token_ids: the tokens at positions [start, start + len(token_ids)).
    start: committed cache rows before this segment (the computed frontier).
    block_ids: the request's block table; must cover positions [0, end).
    sample: True when the segment's last row is a sampling point (prefill
        reaching the prompt end, or a decode row); only those rows get logits.
    """

    token_ids: Sequence[int]  # stored as a tuple
    start: int
    block_ids: Sequence[int]  # stored as a tuple
    sample: bool

    def __post_init__(self) -> None:
        # Accept any int sequence but store tuples, so the spec stays immutable.
        object.__setattr__(self, "token_ids", tuple(map(int, self.token_ids)))
        object.__setattr__(self, "block_ids", tuple(map(int, self.block_ids)))
        if not self.token_ids:
            raise ValueError("a segment needs at least one token row")
        if self.start < 0:
            raise ValueError(f"segment start must be >= 0, got {self.start}")

    @property
    def end(self) -> int:
        return self.start + len(self.token_ids)


@dataclass(frozen=True, slots=True)
class RowBinding:
    """Which request generation, phase and versions every packed row serves
    (0x04 PackedIteration: ``request_key_by_row``, ``phase_by_row``, decision
    id / state version / snapshot versions), derived from a validated plan.

    Per segment i (in packing order): the plan item's request id,
    generation, snapshot version and phase (its derived work kind), and
    ``request_offsets`` [N + 1] of the packed rows; the per-row columns
    expand them, so building a binding costs O(segments), not O(rows).
    A segment's rows may start past its interval's start (cached rows are
    not computed) but never outside it.
    """

    decision_id: int
    input_state_version: int
    request_ids: tuple[str, ...]
    generations: tuple[int, ...]
    snapshot_versions: tuple[int, ...]
    phases: tuple[WorkKind, ...]
    request_offsets: tuple[int, ...]

    @property
    def request_key_by_row(self) -> tuple[tuple[str, int], ...]:
        keys = zip(self.request_ids, self.generations, strict=True)
        return tuple(chain.from_iterable(
            [key] * (end - start) for key, start, end in
            zip(keys, self.request_offsets[:-1], self.request_offsets[1:], strict=True)))

    @property
    def phase_by_row(self) -> tuple[WorkKind, ...]:
        return tuple(chain.from_iterable(
            [phase] * (end - start) for phase, start, end in
            zip(self.phases, self.request_offsets[:-1], self.request_offsets[1:], strict=True)))


def bind_rows(plan: IterationPlan, works: Sequence[WorkItem],
              segments: Sequence[SegmentRows]) -> RowBinding:
    """The binding of ``segments`` (segment i computes rows of ``works[i]``,
    an item of ``plan``) in packing order. Raises ValueError when a segment's
    rows leave its item's interval or an item is not the plan's."""
    if len(works) != len(segments):
        raise ValueError(f"{len(works)} work items for {len(segments)} segments")
    planned = set(plan.work)
    offsets = [0]
    for index, (work, segment) in enumerate(zip(works, segments, strict=True)):
        end = segment.start + len(segment.token_ids)
        if work not in planned:
            raise ValueError(f"segment {index}: {work.request_id} is not an item of the plan")
        if not work.start <= segment.start < end == work.end:
            raise ValueError(f"segment {index}: rows [{segment.start}, {end}) outside the "
                             f"interval [{work.start}, {work.end}) of {work.request_id}")
        offsets.append(offsets[-1] + len(segment.token_ids))
    return RowBinding(plan.decision_id, plan.input_state_version,
                      tuple(w.request_id for w in works), tuple(w.generation for w in works),
                      tuple(w.snapshot_version for w in works), tuple(w.kind for w in works),
                      tuple(offsets))


@dataclass(frozen=True, slots=True, eq=False)
class PackedBatch:
    """Row routes and attention descriptors for one forward (spec 0x04 PackedIteration).

    Tensors (all int64, on the model's device):
        token_ids [Q_tot], positions [Q_tot], slot_mapping [Q_tot]:
            per packed row; slot = block_id * block_size + position % block_size.
        request_offsets [N + 1]: segment i owns rows [o_i, o_{i+1}).
        block_tables [N, max_num_blocks]: row i lists segment i's blocks;
            entries past `num_blocks[i]` are 0 and never read unmasked.
        context_lens [N]: committed cache rows before each segment (= start).
        sample_rows [S]: packed rows that produce logits, in segment order.
    Host copies (`query_lens`, `starts`, `num_blocks`, `sample_segments`,
    `max_block_id`, `max_token_id`) let the forward plan attention and check
    bounds without reading device tensors back.
    """

    token_ids: torch.Tensor
    positions: torch.Tensor
    request_offsets: torch.Tensor
    block_tables: torch.Tensor
    slot_mapping: torch.Tensor
    context_lens: torch.Tensor
    sample_rows: torch.Tensor
    query_lens: tuple[int, ...]
    starts: tuple[int, ...]
    num_blocks: tuple[int, ...]
    sample_segments: tuple[int, ...]
    block_size: int
    max_block_id: int
    max_token_id: int
    #: the batched attention layout (model/batched_attention.py) when the
    #: packer built it; a model on that path builds it itself otherwise
    flex: FlexLayout | None = None
    #: the plan binding of every row (None: rows packed outside an engine plan)
    binding: RowBinding | None = None

    @property
    def num_segments(self) -> int:
        return len(self.query_lens)

    @property
    def num_rows(self) -> int:
        return int(self.token_ids.shape[0])


def pack(
    segments: Sequence[SegmentRows], block_size: int, device: torch.device | str = "cpu",
    binding: RowBinding | None = None,
) -> PackedBatch:
    """Build a PackedBatch from segment specs; pure apart from tensor creation.

    Every field is one numpy operation over the whole batch (no per-row
    Python), then one host-to-device copy per tensor (none on the CPU).
    Raises ValueError when there are no segments, a segment has no rows or
    a block table does not cover its segment's rows.
    """
    host = host_arrays(segments, block_size)

    def as_tensor(values: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(values).to(device)

    return with_binding(host.batch([as_tensor(values) for values in host.arrays()]), binding)


def with_binding(batch: PackedBatch, binding: RowBinding | None) -> PackedBatch:
    """``batch`` bound to ``binding``, whose offsets must be the batch's."""
    if binding is None:
        return batch
    offsets = tuple(chain([0], np.cumsum(batch.query_lens).tolist()))
    if binding.request_offsets != offsets:
        raise ValueError(f"binding offsets {list(binding.request_offsets)} are not the "
                         f"packed offsets {list(offsets)}")
    return replace(batch, binding=binding)


@dataclass(frozen=True, slots=True)
class HostPack:
    """The numpy form of a PackedBatch (int64 arrays, same names) before it
    reaches the device, with the host copies PackedBatch keeps."""

    token_ids: np.ndarray
    positions: np.ndarray
    request_offsets: np.ndarray
    block_tables: np.ndarray
    slot_mapping: np.ndarray
    context_lens: np.ndarray
    sample_rows: np.ndarray
    num_blocks: np.ndarray
    query_lens: np.ndarray
    sample_segments: np.ndarray
    block_size: int
    max_block_id: int

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The arrays that become PackedBatch tensors, in its field order."""
        return (self.token_ids, self.positions, self.request_offsets, self.block_tables,
                self.slot_mapping, self.context_lens, self.sample_rows)

    def batch(self, tensors: Sequence[torch.Tensor],
              flex: FlexLayout | None = None) -> PackedBatch:
        """The PackedBatch whose tensors are `tensors` (`arrays()` on the device)."""
        token_ids, positions, offsets, tables, slots, starts, sample_rows = tensors
        return PackedBatch(
            token_ids=token_ids, positions=positions, request_offsets=offsets,
            block_tables=tables, slot_mapping=slots, context_lens=starts,
            sample_rows=sample_rows,
            query_lens=tuple(self.query_lens.tolist()),
            starts=tuple(self.context_lens.tolist()),
            num_blocks=tuple(self.num_blocks.tolist()),
            sample_segments=tuple(self.sample_segments.tolist()),
            block_size=self.block_size,
            max_block_id=self.max_block_id,
            max_token_id=int(self.token_ids.max()),
            flex=flex,
        )


def host_arrays(segments: Sequence[SegmentRows], block_size: int) -> HostPack:
    """Every field of the batch as one numpy operation over the whole batch
    (no per-row Python); raises as `pack` does."""
    if not segments:
        raise ValueError("pack needs at least one segment")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    num_segments = len(segments)
    query_lens = np.fromiter(map(len, (s.token_ids for s in segments)), np.int64, num_segments)
    starts = np.fromiter((s.start for s in segments), np.int64, num_segments)
    if not query_lens.all():
        raise ValueError(f"segment {int(np.argmin(query_lens))} has no token rows")
    num_blocks = np.fromiter(map(len, (s.block_ids for s in segments)), np.int64, num_segments)
    flat_blocks = np.fromiter(chain.from_iterable(s.block_ids for s in segments), np.int64,
                              int(num_blocks.sum()))
    _check_block_tables(segments, starts + query_lens, num_blocks, flat_blocks, block_size)
    num_rows = int(query_lens.sum())
    token_ids = np.fromiter(chain.from_iterable(s.token_ids for s in segments), np.int64, num_rows)
    offsets = np.zeros(num_segments + 1, np.int64)
    np.cumsum(query_lens, out=offsets[1:])
    segment_of_row = np.repeat(np.arange(num_segments), query_lens)
    positions = np.arange(num_rows) + (starts - offsets[:-1])[segment_of_row]
    tables = np.zeros((num_segments, int(num_blocks.max())), np.int64)
    tables[np.arange(tables.shape[1]) < num_blocks[:, None]] = flat_blocks  # row-major fill
    slots = tables[segment_of_row, positions // block_size] * block_size + positions % block_size
    samples = np.fromiter((s.sample for s in segments), bool, num_segments)
    return HostPack(
        token_ids=token_ids, positions=positions, request_offsets=offsets, block_tables=tables,
        slot_mapping=slots, context_lens=starts, sample_rows=offsets[1:][samples] - 1,
        num_blocks=num_blocks, query_lens=query_lens, sample_segments=np.flatnonzero(samples),
        block_size=block_size, max_block_id=int(flat_blocks.max()))


def _check_block_tables(segments: Sequence[SegmentRows], ends: np.ndarray,
                        num_blocks: np.ndarray, flat_blocks: np.ndarray, block_size: int) -> None:
    """Each table covers rows [0, end) with ids >= 0; the first bad segment raises."""
    num_blocks_needed = blocks_for(ends, block_size)
    if (num_blocks >= num_blocks_needed).all() and flat_blocks.min() >= 0:
        return
    for index, segment in enumerate(segments):
        _check_block_table(index, segment, block_size)


def _check_block_table(index: int, segment: SegmentRows, block_size: int) -> None:
    end = segment.start + len(segment.token_ids)
    num_blocks_needed = blocks_for(end, block_size)
    if len(segment.block_ids) < num_blocks_needed:
        raise ValueError(
            f"segment {index}: rows [0, {end}) need {num_blocks_needed} blocks "
            f"of {block_size}, block table has {len(segment.block_ids)}"
        )
    if any(block < 0 for block in segment.block_ids):
        raise ValueError(f"segment {index}: block ids must be >= 0")
