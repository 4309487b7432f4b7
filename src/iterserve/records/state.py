"""The immutable scheduler state published at each cut (0x01A).

A state is never mutated: :func:`iterserve.records.transition.advance` and the
queue events in :mod:`iterserve.records.events` build successors with a higher
``state_version``. ``views`` holds every live request and the requests that
became terminal at this cut; retired terminal requests leave the state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from iterserve.records.id_queue import Queue
from iterserve.records.kv_abi import blocks_for
from iterserve.records.ledger import ClientLedger
from iterserve.records.live_clients import LiveClients, counted
from iterserve.records.preemption import FallbackMode, PreemptionCostSpec, PreemptionMode
from iterserve.records.rows_bound import RowsBound
from iterserve.records.spec import DEFAULT_EXTENSION_WAIT_MAX_ITERATIONS, OnlineWorkload
from iterserve.records.view import RequestView
from iterserve.records.view_delta import ViewDelta


@dataclass(frozen=True, slots=True)
class CapacityFacts:
    """KV capacity facts published by the memory owner, never by a policy (0x0A).

    Counts only, never block ids (a physical-layout leak, 0x01A). A request
    holding ``c`` computed rows is accounted as ceil(c / block_size) blocks;
    ``num_blocks_free is None`` means memory is unbounded in this run. With
    ``block_size == 1`` the blocks are logical rows (the ``kv_rows`` knob).
    ``num_blocks_pending_release`` blocks are held by releases in flight:
    not free, but they will be without a victim, so a request short of them
    waits (0x06: TEMPORARILY_UNAVAILABLE) rather than preempting.
    """

    block_size: int = 1
    num_blocks_total: int | None = None
    num_blocks_free: int | None = None
    # the memory owner releases a plan's preempted and aborted blocks before
    # it backs that plan's work: one runtime owner whose release is READY at
    # once (vLLM's scheduler frees synchronously, 0x0D), so a plan may count
    # them. False: a release may be INFLIGHT, so no plan counts blocks of a
    # PREEMPT_PENDING request; only a matching READY release publishes them
    # in a later fact (0x0C)
    releases_at_once: bool = True
    num_blocks_pending_release: int = 0

    @property
    def is_bounded(self) -> bool:
        return self.num_blocks_free is not None

    def blocks_for(self, num_rows: int) -> int:
        return blocks_for(num_rows, self.block_size)


def blocks_used_of_total(facts: CapacityFacts) -> tuple[int, int]:
    """(KV blocks held, blocks in all) as a resource sample records them:
    none held when memory is unbounded, none in all without a total."""
    total = facts.num_blocks_total or 0
    return (0 if facts.num_blocks_free is None else total - facts.num_blocks_free), total


@dataclass(frozen=True, slots=True)
class RunRules:
    """Run-level rules every decision of a run shares, taken from the
    workload: the clock ``now`` is measured on (``iteration`` or ``ms``), the
    KV preemption mode and the preservation fallback (0x0C) and the admission
    estimate (``kv.admission``, 0x06). Constant over a run and recorded by the
    log header's workload, so the state digest leaves them out."""

    clock: str = "iteration"
    preemption_mode: PreemptionMode = PreemptionMode.RECOMPUTE
    admission: str = "none"
    preservation_fallback: FallbackMode = FallbackMode.RECOMPUTE  # 0x0C's fallback matrix
    # C_recompute vs C_preserve inputs (mode ``cheaper``) and the bytes a row holds
    preemption_cost: PreemptionCostSpec | None = None
    bytes_per_row: int | None = None
    # consecutive decisions a request may wait on a release in flight (0x06)
    extension_wait_max_iterations: int = DEFAULT_EXTENSION_WAIT_MAX_ITERATIONS

    @classmethod
    def of(cls, workload: OnlineWorkload) -> RunRules:
        kv = workload.kv
        if kv is None:
            return cls(workload.clock)
        return cls(workload.clock, kv.preemption_mode, kv.admission, kv.preservation_fallback,
                   kv.preemption_cost, kv.bytes_per_row, kv.extension_wait_max_iterations)


@dataclass(frozen=True, slots=True)
class SchedulerState:
    """What every policy decides from at cut ``decision_id``.

    Queues hold request ids in their declared order; each live id appears in
    exactly one of waiting/running/suspended. ``service`` is completed token
    service per client, debited only from validated results (0x09A).
    ``rules`` are the run's clock, preemption mode and admission estimate.
    ``rows_bound`` caches an upper bound derived from ``views`` (None: none).
    """

    decision_id: int
    state_version: int
    now: float  # run clock (records/__init__: Time)
    waiting: Queue  # a tuple, or a shared IdQueue once long (records/id_queue)
    running: tuple[str, ...]
    suspended: tuple[str, ...]
    finished: tuple[str, ...]
    views: Mapping[str, RequestView]
    max_num_batched_tokens: int
    max_num_seqs: int
    capacity: CapacityFacts = CapacityFacts()
    service: Mapping[str, int] = field(default_factory=dict)
    ledger: ClientLedger | None = None
    prefix_hits: Mapping[str, int] = field(default_factory=dict)
    # blocks each claimed prefix hit took from the evictable cache
    # (records/prefix_claims): the plan charges them to the claimer; one cut only
    reclaimed_prefix_blocks: Mapping[str, int] = field(default_factory=dict)
    rules: RunRules = RunRules()
    # consecutive decisions each running request has waited on a release in
    # flight (0x06; records/release_waits): the plan preempts at the run's bound
    release_waits: Mapping[str, int] = field(default_factory=dict)
    # a derived bound on p + e over ``views`` the transitions carry forward
    # (records/rows_bound); never encoded, not part of the state's identity
    rows_bound: RowsBound | None = field(default=None, compare=False, repr=False)
    # the ids the transition that made ``views`` wrote or deleted
    # (records/view_delta); never encoded, not part of the state's identity
    view_delta: ViewDelta | None = field(default=None, compare=False, repr=False)
    # live requests per client, carried by the transitions of a run that keeps a
    # ledger (records/live_clients); never encoded, not part of the state's identity
    live_clients: LiveClients | None = field(default=None, compare=False, repr=False)

    def view(self, request_id: str) -> RequestView:
        return self.views[request_id]

    @property
    def num_live(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.suspended)

    def active_clients(self) -> set[str]:
        """Clients with a live (waiting, running or suspended) request."""
        return set(self.live_clients_now().counts)

    def live_clients_now(self) -> LiveClients:
        """Live (and not ready) requests per client: carried by the
        transitions where they hold for these queues, else counted."""
        queues = (self.waiting, self.running, self.suspended)
        live = self.live_clients
        if live is not None and live.holds_for(queues):
            return live
        return counted(self.views, queues)

    @property
    def has_live(self) -> bool:
        return bool(self.waiting or self.running or self.suspended)
