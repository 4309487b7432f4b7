"""Priority with aging (0x09A, F61): p_eff(r, t) = p_base(r) - floor((t - a_r) / q_age).

Smaller p_eff runs first; ties go to the older request (arrival, then
arrival order, request id and generation: the engine numbers arrivals in
time order, so arrival order alone decides). p_eff changes with the clock,
but within one priority it never decreases with a later arrival: each
priority's waiting requests are kept in arrival order across decisions
(:class:`~iterserve.plan.kept_order.KeptOrder`) and the picks merge the
priorities' queues by rank, reading only the requests admitted.
Waiting time is measured on the run's clock (ticks on the ``iteration``
clock, ms on the ``ms`` clock). The tie-break evidence records both inputs
of p_eff (arrival and base priority); q_age is the policy's setting.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from heapq import merge
from operator import itemgetter

from iterserve.plan import PlanBuilder, PolicyContract
from iterserve.plan.feasibility import RunningSet
from iterserve.plan.kept_order import KeptOrder
from iterserve.policies.ordered import schedule_ordered
from iterserve.policies.policy import PolicyBase
from iterserve.policies.settings import PolicyConfigError
from iterserve.records.state import SchedulerState
from iterserve.records.view import RequestView


@dataclass(frozen=True, slots=True)
class AgingConfig:
    """``q_age``: clock units per one-step improvement of p_eff (F61)."""

    q_age: float = 2.0

    def __post_init__(self) -> None:
        q_age = self.q_age
        if isinstance(q_age, bool) or not isinstance(q_age, int | float) \
                or not (math.isfinite(q_age) and q_age > 0):
            raise PolicyConfigError(f"setting q_age: must be finite and > 0, got {q_age!r}")


class PriorityAging(PolicyBase[AgingConfig]):
    policy_id = "priority-aging"
    running_set = RunningSet.PREEMPTS  # the shared preemption step (plan.victims)
    keeps_order = True  # each priority's waiting requests are kept across decisions
    policy_version = "1"
    tie_break_key: tuple[str, ...] = ("arrival", "priority_rank", "arrival_order", "request_id",
                                      "request_generation")
    contract = PolicyContract(
        granularity="iteration; request order for running and admission",
        protected_identity="request (a priority class ages one request at a time)",
        visible_state="declared priority, arrival time, the clock",
        decision_output="one legal interval per selected request; admissions; shared preemption",
        unknown_future="output lengths",
        objective="urgent first, yet an old request's effective priority keeps improving",
        metric="completed events of the low class; wait until first service (0x09A)",
        assumptions="0x09A: identity request; eligible from arrival; cost: none; publication: "
                    "selection; guarantee: a finite-trace escape (F61), assuming finite priorities, deterministic tie-breaks, continued eligibility; an "
                    "adversarial finite trace, not a bounded-wait proof (F61)",
        foreign_owners="KV allocator (capacity facts)",
        source="spec 0x09A aging teaching score F61",
        denominator="completed events of the aged class; wait until first service",
        premises="finite priorities, deterministic tie-breaks, continued eligibility",
        evidence_class="simulated or measured here (iterserve); never source-reported",
        source_version="spec M5.2 0x09A F61 teaching score",
        non_claims="not a bounded-wait proof beyond the finite trace",
    )

    def __init__(self, config: AgingConfig | None = None) -> None:
        super().__init__(config)
        self.kept_by_class = KeptOrder()  # ready waiting requests, per priority by arrival

    def effective_priority(self, view: RequestView, now: float) -> int:
        return view.priority - math.floor((now - view.arrival) / self.config.q_age)

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        def rank(view: RequestView) -> tuple[object, ...]:
            return (self.effective_priority(view, state.now), *_arrival_key(view))

        def order(views: list[RequestView]) -> list[RequestView]:
            return sorted(views, key=rank)

        kept = self.kept_by_class
        kept.sync(state, _class_key)

        def picks(_: object) -> Iterator[RequestView]:
            """The classes' queues merged by rank: within one class the
            kept order (arrival, then arrival order) is rank order, since
            p_eff never decreases with a later arrival."""
            views = state.views
            ranked = (((rank(view), view) for view in map(views.__getitem__, ids))
                      for ids in (map(itemgetter(1), kept.group(priority))
                                  for priority in kept.heads()))
            return map(itemgetter(1), merge(*ranked, key=itemgetter(0)))

        schedule_ordered(builder, state, order, picks)


def _arrival_key(view: RequestView) -> tuple[object, ...]:
    return (view.arrival, view.arrival_order, view.request_id, view.generation)


def _class_key(view: RequestView) -> tuple[object, ...]:
    return (view.priority, *_arrival_key(view))
