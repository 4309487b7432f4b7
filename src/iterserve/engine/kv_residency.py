"""KV residency: the executors' shared adapter over the block manager.

Executors (simulated and torch) own physical memory. Before running a plan
they apply its queue intents (free on recompute/abort, swap out on
preserve, swap in on resume), then back each interval with blocks; after it
they commit rows and free finished requests. Capacity facts (counts only)
flow back to the scheduler through the result (0x0A: the scheduler never
sees block ids). Every shortfall is a fact, never an exception.

Each memory intent is answered by a receipt bound to the request's
:func:`~iterserve.records.receipts.binding_of` (0x0C): a release receipt
for a recompute, abort or reject, a preservation receipt for a preserve.
With ``preservation_lag_iterations > 0`` preservation is asynchronous: the
receipt is INFLIGHT in the intent's iteration and READY that many
iterations later, so PREEMPT_PENDING -> SUSPENDED_PRESERVED spans them.
With ``release_lag_iterations > 0`` a preemption's release is delayed the
same way: its blocks stay held (not free) until the READY release, the
victim stays PREEMPT_PENDING, and the capacity facts say the owner does not
release at once, so no plan counts the blocks of its own preemptions
(0x0C). At 0 (the default) a release is READY in its intent's iteration,
before the plan's work is backed (0x0D's synchronous owner).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby, repeat
from operator import eq

from iterserve.admission.resume import ResumeBlocked
from iterserve.engine.suspensions import SuspensionLedger
from iterserve.kv.block_manager import BlockManager
from iterserve.kv.config import BlockManagerConfig
from iterserve.kv.results import (
    AllocationFailed,
    RequestKey,
    SwapDirection,
    SwapFailed,
    SwapGranted,
)
from iterserve.records.columns import field_columns
from iterserve.records.plan import IntentKind, IterationPlan, WorkItem
from iterserve.records.preemption import FallbackMode
from iterserve.records.prefix_claims import NO_CLAIMS, PrefixClaims
from iterserve.records.receipts import (
    ForeignBinding,
    ForeignStatus,
    PreservationResult,
    ReleaseResult,
    binding_of,
)
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.records.view import RequestView


@dataclass(frozen=True, slots=True)
class KvStats:
    """Counters for reports: preemptions by mode, swapped bytes, prefix-cache hits."""

    num_prefix_hit_tokens: int
    num_swapped_out_blocks: int
    num_swapped_in_blocks: int
    num_failed_allocations: int
    intents: dict[str, int]
    num_planned_hit_rows: int = 0
    # 0x0C telemetry: bytes READY releases reclaimed, resume tickets granted
    # and refused, rows rebuilt under tickets (runtime cost, never service)
    reclaimed_bytes: int = 0
    num_resume_tickets: int = 0
    num_resume_blocked: int = 0
    recompute_overhead_tokens: int = 0


_RELEASING = frozenset({IntentKind.PREEMPT_RECOMPUTE, IntentKind.ABORT, IntentKind.REJECT})
_PREEMPTING = frozenset({IntentKind.PREEMPT_RECOMPUTE, IntentKind.PREEMPT_PRESERVE_EXACT})


@dataclass(frozen=True, slots=True)
class IntentOutcome:
    """What carrying out a plan's intents produced: ``failures`` as
    (request id, reason) and the receipts (release and preservation)."""

    failures: tuple[tuple[str, str], ...]
    releases: tuple[ReleaseResult, ...]
    preservations: tuple[PreservationResult, ...]


@dataclass(slots=True)
class _Outcome:
    """What :meth:`KvResidency.apply_intents` collects, in intent order."""

    failures: list[tuple[str, str]]
    releases: list[ReleaseResult]
    preservations: list[PreservationResult]


SwapCopier = Callable[[SwapDirection, tuple[tuple[int, int], ...]], None]


class KvResidency:
    """``on_swap`` receives (direction, (device_block, host_block) pairs) so an
    executor holding real tensors can copy the rows (PRESERVE_EXACT, 0x0C)."""

    def __init__(self, config: BlockManagerConfig, on_swap: SwapCopier | None = None, *,
                 bytes_per_row: int | None = None, preservation_lag_iterations: int = 0,
                 release_lag_iterations: int = 0) -> None:
        if preservation_lag_iterations < 0 or release_lag_iterations < 0:
            raise ValueError("preservation_lag_iterations and release_lag_iterations must be >= 0")
        self.manager = BlockManager(config)
        self._on_swap = on_swap
        self._bytes_per_row = bytes_per_row
        self._lag = preservation_lag_iterations
        self._release_lag = release_lag_iterations
        # request id -> (binding, iteration its release turns READY)
        self._releasing: dict[str, tuple[ForeignBinding, int]] = {}
        self._iteration = 0
        # request id -> (binding, preserved rows, iteration its receipt turns READY)
        self._preserving: dict[str, tuple[ForeignBinding, int, int]] = {}
        self._keys: dict[str, RequestKey] = {}
        self._prefix_hit_tokens = 0
        self._swapped_out = 0
        self._swapped_in = 0
        self._failed = 0
        self._planned_hit_rows = 0  # hit rows published to the plan (prefill rows saved)
        self._intents: Counter[str] = Counter()
        self.suspensions = SuspensionLedger()  # intents, receipts, resume tickets (0x0C)
        self._reclaimed_bytes = 0

    @property
    def block_size(self) -> int:
        return self.manager.config.block_size_rows

    def facts(self) -> CapacityFacts:
        usage = self.manager.usage()
        free = usage.num_blocks_total - usage.num_blocks_used  # cached blocks are evictable
        return CapacityFacts(self.block_size, usage.num_blocks_total, free,
                             releases_at_once=not self._release_lag,
                             num_blocks_pending_release=self.manager.num_blocks_pending_release)

    def shortfall_reason(self, request_id: str, end: int) -> str:
        """Why backing ``request_id``'s rows up to ``end`` failed: for a
        request holding blocks, the allocator's extension answer (0x06:
        ``extension_temporarily_unavailable`` or ``extension_failed``),
        else a fresh allocation's failure (``kv_allocation``)."""
        key = self._keys.get(request_id)
        if key is None or not self.manager.is_resident(key):
            return "kv_allocation"
        return self.manager.extension_status(key, end).failure_reason

    def key(self, request_id: str) -> RequestKey | None:
        return self._keys.get(request_id)

    def apply_intents(self, plan: IterationPlan, state: SchedulerState) -> IntentOutcome:
        """Carry out the plan's memory consequences: (id, reason) failures and
        the receipts answering each intent, plus READY receipts of earlier
        asynchronous preservations and delayed releases due by this
        iteration. A resume (RESUME, or the ADMIT of a recompute victim)
        needs a resume ticket derived from those facts (0x0C)."""
        self._iteration += 1
        out = _Outcome([], self._completed_releases(), self._completed_preservations())
        fallback = state.rules.preservation_fallback
        for intent in plan.intents:
            self._intents[intent.kind.value] += 1
            rid = intent.request_id
            view = state.views.get(rid)
            if view is None:  # no view to bind a receipt to: the memory action only
                if intent.kind in _RELEASING:
                    self.release([rid])
                continue
            # a preemption opens the next suspension epoch; an ending keeps its own
            binding = binding_of(view, view.suspension_epoch + (intent.kind in _PREEMPTING))
            if intent.kind in _PREEMPTING:
                self.suspensions.suspend(plan, intent, view, binding, fallback)
            elif intent.kind in _RELEASING:
                self.suspensions.forget(rid)
            self._apply(intent.kind, view, binding, fallback, out)
        for release in out.releases:
            self.suspensions.on_release(release)
            self._reclaimed_bytes += release.reclaimed_bytes
        for preservation in out.preservations:
            self.suspensions.on_preservation(preservation)
        return IntentOutcome(tuple(out.failures), tuple(out.releases), tuple(out.preservations))

    def _apply(self, kind: IntentKind, view: RequestView, binding: ForeignBinding,
               fallback: FallbackMode, out: _Outcome) -> None:
        rid = view.request_id
        if kind is IntentKind.PREEMPT_RECOMPUTE and self._release_lag:
            out.releases.append(self._delayed_release(rid, binding))
        elif kind in _RELEASING:
            out.releases.append(self._release_receipt(rid, binding))
        elif kind is IntentKind.PREEMPT_PRESERVE_EXACT:
            self._preserve(view, binding, fallback, out)
        elif kind in (IntentKind.RESUME, IntentKind.ADMIT) and self.suspensions.is_suspended(rid):
            self._resume(view, out)

    def _preserve(self, view: RequestView, binding: ForeignBinding, fallback: FallbackMode,
                  out: _Outcome) -> None:
        """Swap the device blocks out (released from the device at once); a
        failed swap takes the declared fallback (0x0C): the blocks are
        released and the suspension loses its preserved rows."""
        rid = view.request_id
        rows = self._held_rows(rid)
        failure = self._swap_out(rid)
        if failure is not None:
            out.releases.append(self._delayed_release(rid, binding) if self._release_lag
                                else self._release_receipt(rid, binding))
            out.failures.append((rid, failure))
            if fallback is FallbackMode.ABORT:
                self.suspensions.forget(rid)
            else:
                self.suspensions.lose_preserved_rows(rid)
            return
        out.releases.append(ReleaseResult(binding, ForeignStatus.READY,
                                          rows * (self._bytes_per_row or 0)))
        # holding no blocks, it preserves nothing: trivially READY
        out.preservations.append(self._preservation(binding, view.num_computed))

    def _resume(self, view: RequestView, out: _Outcome) -> None:
        """A ticket, or the resume fails as a fact; then swap preserved rows in."""
        rid = view.request_id
        ticket = self.suspensions.resume(view)
        if isinstance(ticket, ResumeBlocked):
            blockers = ",".join(b.value for b in ticket.blockers)
            out.failures.append((rid, f"no_resume_ticket:{blockers}"))
            return
        key = self._keys.get(rid)
        if key is None or not self.manager.is_swapped(key):
            return
        swapped = self.manager.swap_in(key)
        if isinstance(swapped, SwapFailed):
            out.failures.append((rid, f"swap_in_failed:{swapped.reason.value}"))
        else:
            self._copy(swapped)
            self._swapped_in += len(swapped.copy_pairs)

    def _held_rows(self, request_id: str) -> int:
        key = self._keys.get(request_id)
        return 0 if key is None else self.manager.num_rows(key)

    def _swap_out(self, request_id: str) -> str | None:
        """Move the request's blocks to the host pool; the failure reason, if any."""
        key = self._keys.get(request_id)
        if key is None:
            return None
        swapped = self.manager.swap_out(key)
        if isinstance(swapped, SwapFailed):
            self._intents["preserve_fallback_recompute"] += 1
            return f"swap_out_failed:{swapped.reason.value}"
        self._copy(swapped)
        self._swapped_out += len(swapped.copy_pairs)
        return None

    def _release_receipt(self, request_id: str, binding: ForeignBinding) -> ReleaseResult:
        """Free the request's blocks now (release is synchronous here)."""
        key = self._keys.get(request_id)
        num_rows = 0 if key is None else self.manager.num_rows(key)
        self.release([request_id])
        per_row = self._bytes_per_row or 0  # 0: the run declares no bytes per row
        return ReleaseResult(binding, ForeignStatus.READY, num_rows * per_row)

    def _delayed_release(self, request_id: str, binding: ForeignBinding) -> ReleaseResult:
        """An INFLIGHT release: the blocks stay held until it turns READY,
        counted meanwhile as pending release (0x06: a request they would
        make room for waits rather than preempting)."""
        self._releasing[request_id] = (binding, self._iteration + self._release_lag)
        key = self._keys.get(request_id)
        if key is not None and self.manager.is_resident(key):
            self.manager.begin_release(key)
        return ReleaseResult(binding, ForeignStatus.INFLIGHT)

    def _completed_releases(self) -> list[ReleaseResult]:
        """READY receipts of the delayed releases due by this iteration; the
        blocks are freed now, before this iteration's work is backed."""
        due = [rid for rid, (_, ready_at) in self._releasing.items() if ready_at <= self._iteration]
        return [self._release_receipt(rid, self._releasing.pop(rid)[0]) for rid in due]

    @property
    def has_pending_releases(self) -> bool:
        """A delayed release has not reported READY yet."""
        return bool(self._releasing)

    def _preservation(self, binding: ForeignBinding, num_rows: int) -> PreservationResult:
        if not self._lag:
            return PreservationResult(binding, ForeignStatus.READY, num_rows)
        self._preserving[binding.request_id] = (binding, num_rows, self._iteration + self._lag)
        return PreservationResult(binding, ForeignStatus.INFLIGHT)

    def _completed_preservations(self) -> list[PreservationResult]:
        due = [rid for rid, (_, _, ready_at) in self._preserving.items()
               if ready_at <= self._iteration]
        receipts = []
        for rid in due:
            binding, num_rows, _ = self._preserving.pop(rid)
            receipts.append(PreservationResult(binding, ForeignStatus.READY, num_rows))
        return receipts

    @property
    def has_pending_preservations(self) -> bool:
        """An asynchronous preservation has not reported READY yet."""
        return bool(self._preserving)

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
        result = self.manager.grow_to(key, end, token_ids)
        if isinstance(result, AllocationFailed):
            self._failed += 1
            return None
        return result

    def back_and_commit(self, request_id: str, generation: int, start: int, end: int,
                        token_ids: Sequence[int] | None) -> bool:
        """:meth:`prepare` then :meth:`commit` ``end``, for an executor that
        writes rows as soon as they are backed (the simulator); False when
        blocks are short. One block-table lookup for a request that holds
        blocks of this generation."""
        key = self._keys.get(request_id)
        if key is None or key.generation != generation:
            if self.prepare(request_id, generation, start, end, token_ids) is None:
                return False
            self.commit(request_id, end)
            return True
        if self.manager.grow_and_commit(key, end, token_ids) is not None:
            self._failed += 1
            return False
        return True

    def back_and_commit_rows(self, work: Sequence[WorkItem]) -> list[bool]:
        """:meth:`back_and_commit` of each interval of ``work`` in order, as
        anonymous rows (no token ids): whether each was backed. Each run of
        intervals whose requests already hold blocks of their generation
        (every running one) goes to the block manager in one call
        (:meth:`BlockManager.grow_and_commit_rows`); the others one by one,
        in their place."""
        if not work:
            return []
        rids, generations, _, starts, ends, _, _, _ = field_columns(work)
        held = list(map(self._keys.get, rids))
        # a held key equals (id, generation) of its own generation only (a tuple compare in C)
        holds = map(eq, held, zip(rids, generations, strict=True))
        backed: list[bool] = []
        index = 0
        for is_held, run in groupby(holds):
            end = index + len(list(run))
            if is_held:
                grown = self.manager.grow_and_commit_rows(held[index:end],  # type: ignore[arg-type]
                                                          ends[index:end])
                self._failed += grown.count(False)
                backed += grown
            else:
                backed += map(self.back_and_commit, rids[index:end], generations[index:end],
                              starts[index:end], ends[index:end], repeat(None))
            index = end
        return backed

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

    def claim_prefix(self, request_id: str, generation: int,
                     prompt_token_ids: Sequence[int],
                     reclaimed: set[int] | None = None) -> tuple[int, int]:
        """Publish a waiting request's verified prefix hit as a fact the plan
        can count on (0x0E): the cached rows are held for it now, so its
        computed frontier may start past them. Returns (rows held, blocks
        of the hit that were evictable); (0, 0): no hit, or the request
        already holds blocks. ``reclaimed``: block ids earlier claims of the
        same decision reclaimed (updated): a hit sharing them counts them
        too, since the claim that reclaimed them may not be scheduled."""
        if request_id in self._keys:
            return 0, 0
        key = RequestKey(request_id, generation)
        claimed = self.manager.claim_prefix(key, prompt_token_ids)
        if not claimed.num_rows:
            return 0, 0
        self._keys[request_id] = key
        self._prefix_hit_tokens += claimed.num_rows
        self._planned_hit_rows += claimed.num_rows
        if reclaimed is None:
            return claimed.num_rows, claimed.num_reclaimed_blocks
        reclaimed.update(claimed.reclaimed_block_ids)
        held = self.manager.block_table(key)
        return claimed.num_rows, sum(block_id in reclaimed for block_id in held)

    def claim_prefix_hits(self, state: SchedulerState,
                          prompt_of: Callable[[str], Sequence[int] | None]) -> PrefixClaims:
        """Claimed hits of the waiting requests that have computed nothing
        yet and whose prompt tokens ``prompt_of`` knows (0x0E). Only the
        first ``max_num_seqs`` waiting requests are looked up: no plan
        admits more, and a long queue would otherwise be hashed every step."""
        hits, reclaimed = {}, {}
        reclaimed_ids: set[int] = set()
        views = state.views
        for rid in state.waiting[:state.max_num_seqs]:
            view = views[rid]
            if view.num_computed or view.num_emitted:
                continue
            prompt = prompt_of(rid)
            if prompt is None:
                continue
            rows, blocks = self.claim_prefix(rid, view.generation, prompt, reclaimed_ids)
            if rows:
                hits[rid] = rows
                if blocks:
                    reclaimed[rid] = blocks
        return PrefixClaims(hits, reclaimed) if hits else NO_CLAIMS

    def commit(self, request_id: str, end: int) -> None:
        """Record rows [0, end) as written (never below a prefix hit's rows)."""
        key = self._keys.get(request_id)
        if key is not None:
            self.manager.commit_to(key, end)

    def end(self, request_ids: Iterable[str]) -> None:
        """:meth:`release` the blocks of requests that ended (finished), and
        close their suspension records: they will never resume."""
        request_ids = list(request_ids)
        for rid in request_ids:
            self.suspensions.forget(rid)
        self.release(request_ids)

    def release(self, request_ids: Iterable[str]) -> None:
        for rid in request_ids:
            self._preserving.pop(rid, None)
            self._releasing.pop(rid, None)
            key = self._keys.pop(rid, None)
            if key is not None:
                self.manager.release(key)

    def stats(self) -> KvStats:
        ledger = self.suspensions
        return KvStats(self._prefix_hit_tokens, self._swapped_out, self._swapped_in,
                       self._failed, dict(sorted(self._intents.items())),
                       self._planned_hit_rows, self._reclaimed_bytes, len(ledger.tickets),
                       ledger.num_blocked, ledger.recompute_overhead_tokens)
