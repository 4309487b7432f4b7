"""completion_reconciled_vtc_teaching_v1 (0x09A): NOT VTC Algorithm 2.

Two counters per client. W_done is authoritative: the state's client ledger
publishes it only from completed intervals (F52). C_select is provisional
and lives only inside one planning window: it starts at W_done, and each
selected event adds its predicted weighted cost before the next pick. When
the result comes back, C_select is reconciled to the new W_done: a completed
event keeps its (actual) charge, a failed one is rolled back, since the
next plan starts from W_done again. Selection: the earliest ready event
(running or waiting) of the client with the least C_select.
"""

from __future__ import annotations

from iterserve.plan import PlanBuilder, PolicyContract, views_of
from iterserve.plan.feasibility import RunningSet
from iterserve.plan.passes import resume_suspended
from iterserve.plan.victims import add_or_preempt, fcfs_victim
from iterserve.policies.fair_config import LedgerPolicy
from iterserve.records.ledger import ClientLedger, interval_cost
from iterserve.records.state import SchedulerState
from iterserve.records.view import Lifecycle, RequestView


class VtcCompleted(LedgerPolicy):
    policy_id = "vtc-completed"
    running_set = RunningSet.PREEMPTS  # the shared preemption step (plan.victims)
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

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        ledger = state.ledger or ClientLedger(self.ledger_weights)
        resume_suspended(builder, state)
        queues: dict[str, list[RequestView]] = {}
        live = views_of(state, state.running) + views_of(state, state.waiting)
        for view in sorted(live, key=lambda v: v.arrival_order):
            if view.is_ready and not builder.is_chosen(view.request_id):
                queues.setdefault(view.client_id, []).append(view)
        c_select = {client: ledger.done_of(client) for client in queues}
        # on a KV shortfall the shared preemption step takes the most-served client's newest
        victims = sorted(views_of(state, state.running),
                         key=lambda v: (ledger.done_of(v.client_id), v.arrival_order))
        gone: set[str] = set()
        while queues and builder.can_add():
            client = min(queues, key=lambda c: (c_select[c], c))
            view = queues[client].pop(0)
            if not queues[client]:
                del queues[client]
            rows = 0 if view.request_id in gone else _take(builder, view, victims, gone)
            if rows:  # the provisional reservation for this decision
                start = view.num_computed
                c_select[client] += interval_cost(ledger.weights, view, start, start + rows)


def _take(builder: PlanBuilder, view: RequestView, victims: list[RequestView],
          gone: set[str]) -> int:
    """Rows granted to ``view``'s next interval (a running one may preempt)."""
    if view.lifecycle is not Lifecycle.RUNNING:
        return builder.take(view)
    rows = builder.rows_within_tokens(view)
    add_or_preempt(builder, view, rows, victims, gone, fcfs_victim)
    return rows if builder.is_chosen(view.request_id) else 0
