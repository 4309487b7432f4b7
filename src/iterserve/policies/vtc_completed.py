"""completion_reconciled_vtc_teaching_v1 (0x09A): NOT VTC Algorithm 2.

Two counters per client. W_done is authoritative: the state's client ledger
publishes it only from completed intervals (F52). C_select is provisional
and lives only inside one planning window: it starts at W_done, and each
selected event adds its predicted weighted cost before the next pick. When
the result comes back, C_select is reconciled to the new W_done: a completed
event keeps its (actual) charge, a failed one is rolled back, since the
next plan starts from W_done again. Selection: the earliest ready event
(running or waiting) of the client with the least C_select.

Each client's waiting requests are kept in arrival order across decisions
(:class:`~iterserve.plan.kept_order.KeptOrder`), and a stretch of them that
cannot be admitted (no waiting request's first interval fits the blocks
left) is passed over at once, so a decision under overload costs what it
grants, not the length of the queue.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from iterserve.plan import PlanBuilder, PolicyContract, views_of
from iterserve.plan.feasibility import RunningSet
from iterserve.plan.kept_order import KeptOrder, client_arrival_key
from iterserve.plan.passes import resume_suspended
from iterserve.plan.victims import add_or_preempt, fcfs_victim
from iterserve.policies.fair_config import FairConfig, LedgerPolicy
from iterserve.records.ledger import ClientLedger, interval_cost
from iterserve.records.spec import FairnessSpec
from iterserve.records.state import SchedulerState
from iterserve.records.view import Lifecycle, RequestView


class VtcCompleted(LedgerPolicy):
    policy_id = "vtc-completed"
    running_set = RunningSet.PREEMPTS  # the shared preemption step (plan.victims)
    keeps_order = True  # each client's waiting requests are kept across decisions
    policy_version = "1"
    tie_break_key: tuple[str, ...] = ("client_done", "client_id", "arrival_order", "request_id",
                                      "request_generation")
    contract = PolicyContract(
        granularity="iteration; one event (legal interval) per pick",
        protected_identity="client_id",
        visible_state="W_done per client (state ledger), frontiers of live requests",
        decision_output="intervals in provisional-counter order; admissions; shared preemption",
        unknown_future="output lengths; whether an event will complete",
        objective="teaching: least provisional weighted service first",
        metric="C_select and W_done per decision (fairness.ledger_trace), service gap",
        assumptions="0x09A: eligible while backlogged; cost F52 / client weight; publication: "
                    "completed intervals (C_select provisional in one plan); guarantee: none. "
                    "Charging moved from join to completion: the VTC theorem does NOT transfer "
                    "and no bound is claimed",
        foreign_owners="KV allocator (capacity facts)",
        source="spec 0x09A completion_reconciled_vtc_teaching_v1 (a teaching adaptation)",
        denominator="weighted completed tokens per client",
        premises="none: the VTC theorem does not transfer to completion charging",
        evidence_class="simulated or measured here (iterserve); never source-reported",
        source_version="spec M5.2 0x09A completion_reconciled_vtc_teaching_v1",
        non_claims="not VTC Algorithm 2; no new fairness theorem",
    )

    def __init__(self, config: FairConfig | None = None,
                 declared: FairnessSpec | None = None) -> None:
        super().__init__(config, declared)
        # ready waiting requests, per client in arrival order and by first-interval rows
        self.kept_by_client = KeptOrder(index_rows=True)

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        ledger = state.ledger or ClientLedger(self.ledger_weights)
        resume_suspended(builder, state)
        kept = self.kept_by_client
        kept.sync(state, client_arrival_key)
        queues = _client_queues(builder, state, kept)
        c_select = {client: ledger.done_of(client) for client in queues}
        # on a KV shortfall the shared preemption step takes the most-served client's newest
        victims = sorted(views_of(state, state.running),
                         key=lambda v: (ledger.done_of(v.client_id), v.arrival_order))
        gone: set[str] = set()
        kept_fit = _KeptFit(builder, kept)
        while queues and builder.can_add():
            client = min(queues, key=lambda c: (c_select[c], c))
            view = queues[client].pop(kept_fit)
            if view is None:
                del queues[client]
                continue
            rows = 0 if view.request_id in gone else _take(builder, view, victims, gone)
            if rows:  # the provisional reservation for this decision
                start = view.num_computed
                c_select[client] += interval_cost(ledger.weights, view, start, start + rows)


class _ClientQueue:
    """One client's ready live requests in arrival order, read lazily: its
    running ones (a short list) merged with its waiting ones (the kept
    order's group)."""

    __slots__ = ("_running", "_index", "_kept", "_client", "_views", "_waiting", "_next_waiting")

    def __init__(self, client: str, running: list[RequestView], kept: KeptOrder,
                 views: Mapping[str, RequestView]) -> None:
        self._running, self._index = running, 0
        self._kept, self._client, self._views = kept, client, views
        self._waiting = kept.group(client)
        self._next_waiting = next(self._waiting, None)

    def pop(self, kept_fit: _KeptFit) -> RequestView | None:
        """The next request, or None when none is left. Waiting ones refused
        for blocks are passed over at once, to the first that
        ``kept_fit`` says may fit or the next running one: each refusal
        would change neither the plan nor the counters, so the pick would
        stay with this client through all of them."""
        running = self._running[self._index] if self._index < len(self._running) else None
        bound = math.inf if running is None else running.arrival_order
        waiting = self._next_waiting
        if waiting is not None and waiting[0][1] < bound:
            if not kept_fit.may_fit(waiting[2]):
                first = kept_fit.first_fitting(self._client, waiting[0][1], bound)
                self._waiting = self._kept.group(self._client, bound if first is None else first)
                waiting = next(self._waiting, None)
            if waiting is not None and waiting[0][1] < bound:
                self._next_waiting = next(self._waiting, None)
                return self._views[waiting[1]]
            self._next_waiting = waiting
        if running is None:
            return None
        self._index += 1
        return running


class _KeptFit:
    """Which kept waiting requests' first intervals may fit the blocks the
    plan has left (:meth:`KeptOrder.admits_none`, :meth:`KeptOrder.rows_limit`):
    an off-block one (rows None) always may."""

    __slots__ = ("_builder", "_kept")

    def __init__(self, builder: PlanBuilder, kept: KeptOrder) -> None:
        self._builder, self._kept = builder, kept

    def may_fit(self, rows: int | None) -> bool:
        builder, kept = self._builder, self._kept
        free, tokens = builder.num_blocks_free, builder.tokens_left
        if kept.admits_none(free, tokens):
            return False
        return rows is None or rows <= kept.rows_limit(free, tokens)

    def first_fitting(self, client: str, start: int, stop: float) -> int | None:
        """The first arrival order in ``[start, stop)`` of ``client``'s kept
        requests that may fit, or None."""
        builder, kept = self._builder, self._kept
        free, tokens = builder.num_blocks_free, builder.tokens_left
        if kept.admits_none(free, tokens):
            return None
        return kept.first_fitting(client, start, stop, kept.rows_limit(free, tokens))


def _client_queues(builder: PlanBuilder, state: SchedulerState,
                   kept: KeptOrder) -> dict[str, _ClientQueue]:
    """Per client with a ready request not yet chosen, its queue."""
    running: dict[str, list[RequestView]] = {}
    for view in sorted(views_of(state, state.running), key=lambda v: v.arrival_order):
        if view.is_ready and not builder.is_chosen(view.request_id):
            running.setdefault(view.client_id, []).append(view)
    clients = set(running).union(kept.heads())
    return {client: _ClientQueue(client, running.get(client, []), kept, state.views)
            for client in clients}


def _take(builder: PlanBuilder, view: RequestView, victims: list[RequestView],
          gone: set[str]) -> int:
    """Rows granted to ``view``'s next interval (a running one may preempt)."""
    if view.lifecycle is not Lifecycle.RUNNING:
        return builder.take(view)
    rows = builder.rows_within_tokens(view)
    add_or_preempt(builder, view, rows, victims, gone, fcfs_victim)
    return rows if builder.is_chosen(view.request_id) else 0
