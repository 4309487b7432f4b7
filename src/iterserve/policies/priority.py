"""Static priority (0x09A): a priority number is not a liveness rule.

Running requests, then waiting ones, by declared priority (smaller is more
urgent), oldest first within a priority. Under a steady stream of urgent
requests a less urgent one completes nothing: see ``priority-aging``.
The waiting order depends on the view alone, so it is kept across
decisions (:class:`~iterserve.plan.kept_order.KeptOrder`) and a decision
reads only the requests it admits and the first that does not fit.
"""

from __future__ import annotations

from iterserve.plan import PlanBuilder, PolicyContract
from iterserve.plan.feasibility import RunningSet
from iterserve.plan.kept_order import KeptOrder, Key
from iterserve.policies.ordered import schedule_ordered
from iterserve.policies.policy import PolicyBase
from iterserve.records.keys import key_function
from iterserve.records.state import SchedulerState
from iterserve.records.view import RequestView


class StaticPriority(PolicyBase):
    policy_id = "priority"
    running_set = RunningSet.PREEMPTS  # the shared preemption step (plan.victims)
    keeps_order = True  # the waiting queue's priority order is kept across decisions
    policy_version = "1"
    tie_break_key: tuple[str, ...] = ("priority_rank", "arrival_order", "request_id",
                                      "request_generation")
    contract = PolicyContract(
        granularity="iteration; request order for running and admission",
        protected_identity="priority class",
        visible_state="declared priority, arrival order",
        decision_output="one legal interval per selected request; admissions; shared preemption",
        unknown_future="output lengths",
        objective="serve the most urgent priority first",
        metric="per-priority latency; starvation count (0x09A F63)",
        assumptions="0x09A: identity priority class; eligible from arrival; cost: none; "
                    "publication: selection; guarantee: priority order only, none about liveness: a persistent urgent stream starves the rest",
        foreign_owners="KV allocator (capacity facts)",
        source="spec 0x09A static-priority fixture",
        denominator="completed events per priority class",
        premises="none",
        evidence_class="simulated or measured here (iterserve); never source-reported",
        source_version="spec M5.2 0x09A static-priority fixture",
        non_claims="no liveness, no bounded wait",
    )

    def __init__(self, config: None = None) -> None:
        super().__init__(config)
        self.kept_waiting = KeptOrder()  # ready waiting requests by the tie-break key

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        key = key_function(self.tie_break_key, state)
        kept = self.kept_waiting
        kept.sync(state, _priority_key)
        schedule_ordered(builder, state, lambda views: sorted(views, key=key),
                         lambda _: kept.views(state))


def _priority_key(view: RequestView) -> Key:
    """The tie-break key's fields, read from the view (``key_function``'s
    form reads them by name for every view of a sort)."""
    return (view.priority, view.arrival_order, view.request_id, view.generation)
