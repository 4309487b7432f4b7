"""Least-service client order: the simple baseline of 0x09A.

Running requests, then waiting ones, in order of their client's weighted
completed service W_done (the state's client ledger, F52), oldest request
first within a client. W_done moves only when results publish completed
work, so several requests of the least-served client may be admitted in one
plan: this is the baseline that VTC's charge-at-join improves on.

Since W_done does not move within a decision, the waiting order is the
clients by (W_done, client id), each client's requests in arrival order:
each client's queue is kept across decisions
(:class:`~iterserve.plan.kept_order.KeptOrder`) and a decision orders the
clients, not the requests.
"""

from __future__ import annotations

from collections.abc import Iterator

from iterserve.plan import PlanBuilder, PolicyContract
from iterserve.plan.feasibility import RunningSet
from iterserve.plan.kept_order import KeptOrder, client_arrival_key
from iterserve.policies.fair_config import FairConfig, LedgerPolicy
from iterserve.policies.ordered import schedule_ordered
from iterserve.records.keys import key_function
from iterserve.records.spec import FairnessSpec
from iterserve.records.state import SchedulerState
from iterserve.records.view import RequestView


class LeastService(LedgerPolicy):
    policy_id = "least-service"
    running_set = RunningSet.PREEMPTS  # the shared preemption step (plan.victims)
    keeps_order = True  # each client's waiting requests are kept across decisions
    policy_version = "1"
    tie_break_key: tuple[str, ...] = ("client_done", "client_id", "arrival_order", "request_id",
                                      "request_generation")
    contract = PolicyContract(
        granularity="iteration; client order for running and admission",
        protected_identity="client_id",
        visible_state="per-client weighted completed service W_done (state ledger), arrival order",
        decision_output="one legal interval per selected request; admissions; shared preemption",
        unknown_future="output lengths",
        objective="serve the least-served client first",
        metric="per-client service, max backlogged service gap, starvation count (0x09A)",
        assumptions="0x09A: eligible while backlogged; cost F52 weighted tokens / client weight; "
                    "publication: completed intervals; guarantee: none (a baseline). "
                    "No charge at "
                    "selection, so one plan may admit several requests of one client; "
                    "no service-difference bound is claimed",
        foreign_owners="KV allocator (capacity facts)",
        source="spec 0x09A least-service teaching policy",
        denominator="weighted tokens per client over a jointly backlogged interval",
        premises="none (a baseline; no theorem)",
        evidence_class="simulated or measured here (iterserve); never source-reported",
        source_version="spec M5.2 0x09A (Loop 8 teaching baseline)",
        non_claims="no service-difference bound; no SLO objective; not VTC",
    )

    def __init__(self, config: FairConfig | None = None,
                 declared: FairnessSpec | None = None) -> None:
        super().__init__(config, declared)
        self.kept_by_client = KeptOrder()  # ready waiting requests, per client in arrival order

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        key = key_function(self.tie_break_key, state)
        kept = self.kept_by_client
        kept.sync(state, client_arrival_key)
        schedule_ordered(builder, state, lambda views: sorted(views, key=key),
                         lambda _: _least_done_first(kept, state))


def _least_done_first(kept: KeptOrder, state: SchedulerState) -> Iterator[RequestView]:
    """The kept requests in the tie-break key's order: clients by (W_done,
    client id), each client's requests in arrival order (lazily)."""
    ledger, views = state.ledger, state.views
    clients = list(kept.heads())
    if ledger is not None:
        clients.sort(key=lambda client: (ledger.done_of(client), client))
    for client in clients:
        for element in kept.group(client):
            yield views[element[1]]
