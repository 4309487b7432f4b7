"""Prefill-first baseline: prefill and rebuild rows before decode rows (0x09).

Under persistent prefill pressure it gives decodes zero rows (0x09
counterexample). A teaching baseline, not a production policy.
"""

from __future__ import annotations

from iterserve.plan import PlanBuilder, PolicyContract
from iterserve.plan.passes import schedule_in_key_order
from iterserve.policies.settings import Configured
from iterserve.records.plan import IterationPlan
from iterserve.records.state import SchedulerState


class PrefillFirst(Configured):
    policy_id = "prefill-first"
    policy_version = "1"
    tie_break_key: tuple[str, ...] = ("prefill_first_rank", "priority_rank", "arrival_order",
                                      "request_id", "request_generation")
    contract = PolicyContract(
        granularity="iteration, token interval",
        protected_identity="request_id + generation + snapshot_version",
        visible_state="frontiers, priorities, arrival order, readiness",
        decision_output="prefill chunks first, then decode rows in key order",
        unknown_future="output lengths",
        objective="TTFT",
        metric="TTFT; decode starvation under persistent pressure (0x09)",
        assumptions="priority: lower value is more urgent",
        foreign_owners="readiness facts",
        source="spec 0x09 starvation counterexample",
    )

    def choose(self, state: SchedulerState) -> IterationPlan:
        builder = PlanBuilder(self, state)
        schedule_in_key_order(builder, state, self.tie_break_key)
        return builder.build()
