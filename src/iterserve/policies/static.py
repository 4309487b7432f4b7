"""Static (request-level) batching, the 0x02 baseline.

A cohort runs until its slowest member finishes; members that finish early
leave their slot idle (the fixed-batch barrier). The next cohort forms from
waiting requests in arrival order only when the running set is empty; the
first waiting request that is not admitted ends the cohort (FCFS: a younger
request never overtakes it), so the worst cohort is known before the run
(``plan/feasibility.py``).
"""

from __future__ import annotations

from iterserve.plan import PlanBuilder, PolicyContract, views_of
from iterserve.plan.feasibility import RunningSet
from iterserve.plan.kept_order import KeptOrder, in_arrival_order
from iterserve.policies.policy import PolicyBase
from iterserve.records.state import SchedulerState


class StaticBatching(PolicyBase):
    policy_id = "static"
    running_set = RunningSet.COHORT
    tie_break_key: tuple[str, ...] = ("arrival_order", "request_id", "request_generation")
    contract = PolicyContract.parse("""
        granularity: request cohort
        protected_identity: request_id + generation
        visible_state: waiting queue in arrival order, running cohort frontiers
        decision_output: cohort membership; each member's next interval
        unknown_future: output lengths (cohort waits for the slowest)
        objective: none beyond completing the cohort
        metric: logical slot occupancy (not measured GPU utilization)
        assumptions: membership frozen until every member finishes
        foreign_owners: none
        source: spec 0x02; ORCA paper Figure 3 (the baseline it replaces)
        denominator: max_num_seqs x iterations
        premises: none (the baseline ORCA replaces)
        evidence_class: simulated or measured here (iterserve); never source-reported
        source_version: spec M5.2 0x02; ORCA, OSDI 2022, Figure 3
        non_claims: not measured GPU utilization; no runtime reproduced
    """)

    keeps_order = True  # the waiting queue in arrival order, kept across decisions

    def __init__(self, config: object | None = None) -> None:
        super().__init__(config)
        self.kept_waiting = KeptOrder(ready_only=False)

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        # followed at every decision, read only when a request joins
        waiting = in_arrival_order(self.kept_waiting, state)
        if state.running:
            for view in views_of(state, state.running):
                builder.add(view)
        else:
            for view in waiting:
                if not builder.can_add():
                    break
                if not builder.admit(view) and not builder.is_aborted(view):
                    break  # FCFS: a younger request never overtakes one that waits
