"""Decode-first: ready decode rows before ready prefill (0x01A Loop 2, 0x09).

Ordered by (phase_rank, priority_rank, arrival_order, request_id,
request_generation). Under persistent decode pressure it gives waiting
prefill zero rows (0x09 counterexample); see ``decode-first-bounded``.
"""

from __future__ import annotations

from iterserve.plan import PlanBuilder, PolicyContract
from iterserve.plan.passes import schedule_in_key_order
from iterserve.policies.settings import Configured
from iterserve.records.plan import IterationPlan
from iterserve.records.state import SchedulerState


class DecodeFirst(Configured):
    policy_id = "decode-first"
    policy_version = "1"
    tie_break_key: tuple[str, ...] = ("phase_rank", "priority_rank", "arrival_order",
                                      "request_id", "request_generation")
    contract = PolicyContract(
        granularity="iteration, token interval",
        protected_identity="request_id + generation + snapshot_version",
        visible_state="frontiers, priorities, arrival order, readiness",
        decision_output="decode rows first, then prefill chunks in key order",
        unknown_future="output lengths",
        objective="decode cadence (TBT)",
        metric="TBT; prefill starvation under persistent pressure (0x09)",
        assumptions="priority: lower value is more urgent",
        foreign_owners="readiness facts",
        source="spec 0x01A Loop 2 fixture policy; 0x09 counterexample",
    )

    def choose(self, state: SchedulerState) -> IterationPlan:
        builder = PlanBuilder(self, state)
        schedule_in_key_order(builder, state, self.tie_break_key)
        return builder.build()
