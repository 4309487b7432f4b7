"""KV residency: the executors' shared adapter over the block manager.

Executors (simulated and torch) own physical memory. Before running a plan
they apply its queue intents (free on recompute/abort, swap out on
preserve, swap in on resume), then back each interval with blocks; after it
they commit rows and free finished requests. Capacity facts (counts only)
flow back to the scheduler through the result (0x0A: the scheduler never
sees block ids). Every shortfall is a fact, never an exception.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from iterserve.kv.block_manager import BlockManager
from iterserve.kv.config import BlockManagerConfig
from iterserve.kv.results import (
    AllocationFailed,
    RequestKey,
    SwapDirection,
    SwapFailed,
    SwapGranted,
)
from iterserve.records.plan import IntentKind, IterationPlan
from iterserve.records.state import CapacityFacts


@dataclass(frozen=True, slots=True)
class KvStats:
    """Counters for reports (issue: preemptions by mode, swapped bytes, hits)."""

    num_prefix_hit_tokens: int
    num_swapped_out_blocks: int
    num_swapped_in_blocks: int
    num_failed_allocations: int
    intents: dict[str, int]


SwapCopier = Callable[[SwapDirection, tuple[tuple[int, int], ...]], None]


class KvResidency:
    """``on_swap`` receives (direction, (device_block, host_block) pairs) so an
    executor holding real tensors can copy the rows (PRESERVE_EXACT, 0x0C)."""

    def __init__(self, config: BlockManagerConfig, on_swap: SwapCopier | None = None) -> None:
        self.manager = BlockManager(config)
        self._on_swap = on_swap
        self._keys: dict[str, RequestKey] = {}
        self._prefix_hit_tokens = 0
        self._swapped_out = 0
        self._swapped_in = 0
        self._failed = 0
        self._intents: Counter[str] = Counter()

    @property
    def block_size(self) -> int:
        return self.manager.config.block_size_rows

    def facts(self) -> CapacityFacts:
        usage = self.manager.usage()
        free = usage.num_blocks_total - usage.num_blocks_used  # cached blocks are evictable
        return CapacityFacts(self.block_size, usage.num_blocks_total, free)

    def key(self, request_id: str) -> RequestKey | None:
        return self._keys.get(request_id)

    def apply_intents(self, plan: IterationPlan) -> list[tuple[str, str]]:
        """Carry out the plan's memory consequences; returns (id, reason) failures."""
        failures = []
        for intent in plan.intents:
            self._intents[intent.kind.value] += 1
            rid = intent.request_id
            if intent.kind in (IntentKind.PREEMPT_RECOMPUTE, IntentKind.ABORT, IntentKind.REJECT):
                self.release([rid])
            elif intent.kind is IntentKind.PREEMPT_PRESERVE and rid in self._keys:
                swapped = self.manager.swap_out(self._keys[rid])
                if isinstance(swapped, SwapFailed):  # falls back to recompute: free (0x0C)
                    self.release([rid])
                    self._intents["preserve_fallback_recompute"] += 1
                    failures.append((rid, f"swap_out_failed:{swapped.reason.value}"))
                else:
                    self._copy(swapped)
                    self._swapped_out += len(swapped.copy_pairs)
            elif intent.kind is IntentKind.RESUME and rid in self._keys and (
                self.manager.is_swapped(self._keys[rid])
            ):
                swapped = self.manager.swap_in(self._keys[rid])
                if isinstance(swapped, SwapFailed):
                    failures.append((rid, f"swap_in_failed:{swapped.reason.value}"))
                else:
                    self._copy(swapped)
                    self._swapped_in += len(swapped.copy_pairs)
        return failures

    def _copy(self, swapped: SwapGranted) -> None:
        if self._on_swap is not None and swapped.copy_pairs:
            self._on_swap(swapped.direction, swapped.copy_pairs)

    def block_table(self, request_id: str) -> tuple[int, ...]:
        return self.manager.block_table(self._keys[request_id])

    def prepare(self, request_id: str, generation: int, start: int, end: int,
                token_ids: Sequence[int] | None,
                lookahead: Sequence[int] | None = None) -> int | None:
        """Back rows [start, end) with blocks. Returns how many leading rows of
        the request are already committed (a prefix hit; the caller computes
        from max(start, that)), or None when blocks are short.

        ``token_ids`` are the tokens at positions [0, end) for a fresh
        allocation, or [start, end) for growth; None: anonymous rows. On a
        fresh allocation ``lookahead`` (the tokens up to the request's
        target) lets a hit reach past this chunk, so later chunks of a
        chunked prefill skip cached rows too.
        """
        key = self._keys.get(request_id)
        if key is not None and key.generation != generation:
            self.release([request_id])
            key = None
        if key is None:
            return self._allocate(request_id, generation, end, token_ids, lookahead)
        grow = end - self.manager.num_rows(key)
        if grow <= 0:
            return self.manager.num_committed_rows(key)
        tail = None if token_ids is None else token_ids[len(token_ids) - grow:]
        result = self.manager.append_rows(key, tail, num_rows=None if tail else grow)
        if isinstance(result, AllocationFailed):
            self._failed += 1
            return None
        return self.manager.num_committed_rows(key)

    def _allocate(self, request_id: str, generation: int, end: int,
                  token_ids: Sequence[int] | None,
                  lookahead: Sequence[int] | None) -> int | None:
        key = RequestKey(request_id, generation)
        if token_ids is not None and lookahead is not None and len(lookahead) > end:
            hit = self.manager.lookup_prefix(lookahead).num_cached_rows
            if hit >= end:  # back the hit and the next row: its blocks are already written
                token_ids = lookahead[: hit + 1]
        result = self.manager.allocate(key, token_ids, num_rows=None if token_ids else end)
        if isinstance(result, AllocationFailed):
            self._failed += 1
            return None
        self._keys[request_id] = key
        self._prefix_hit_tokens += result.num_cached_rows
        return result.num_cached_rows

    def commit(self, request_id: str, end: int) -> None:
        """Record rows [0, end) as written (never below a prefix hit's rows)."""
        key = self._keys.get(request_id)
        if key is not None and end > self.manager.num_committed_rows(key):
            self.manager.commit(key, end)

    def release(self, request_ids: Iterable[str]) -> None:
        for rid in request_ids:
            key = self._keys.pop(rid, None)
            if key is not None:
                self.manager.release(key)

    def stats(self) -> KvStats:
        return KvStats(self._prefix_hit_tokens, self._swapped_out, self._swapped_in,
                       self._failed, dict(sorted(self._intents.items())))
