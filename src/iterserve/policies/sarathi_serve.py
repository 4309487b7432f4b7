"""Sarathi-Serve stall-free scheduling (Algorithm 3; Agrawal et al. 2024).

With token budget tau (``capacity.tau``, else the iteration token budget):
1. every running decode gets its row (KV shortfall preempts the latest
   arrival, as the vLLM base it is built on does);
2. ongoing partial prefills get min(remaining, tau - n_t);
3. new requests are admitted last, chunked to the leftover, while tau and
   memory allow.
Decodes are never paused behind a long prefill while tau covers them.
"""

from __future__ import annotations

from iterserve.policies.base import (
    PlanBuilder,
    PolicyContract,
    add_or_preempt,
    fcfs_victim,
    resume_suspended,
    views_of,
)
from iterserve.records.plan import IterationPlan
from iterserve.records.spec import OnlineWorkload
from iterserve.records.state import SchedulerState


class SarathiServe:
    policy_id = "sarathi-serve"
    policy_version = "1"
    tie_break_key: tuple[str, ...] = ("phase_rank", "queue_rank", "arrival_order",
                                      "request_id", "request_generation")
    contract = PolicyContract(
        granularity="iteration, token interval",
        protected_identity="request_id + generation + snapshot_version",
        visible_state="running decodes, partial prefills, waiting queue, KV capacity facts",
        decision_output="all decodes, then partial prefill, then admissions under tau",
        unknown_future="output lengths",
        objective="stall-free decodes under a TBT-derived token budget tau",
        metric="TBT/TPOT and capacity under SLO",
        assumptions="tau profiled offline for the TBT SLO",
        foreign_owners="KV allocator (capacity facts)",
        source="Agrawal et al., Sarathi-Serve (OSDI 2024), Algorithm 3",
    )

    def choose(self, workload: OnlineWorkload, state: SchedulerState) -> IterationPlan:
        builder = PlanBuilder(self, state, token_budget=workload.capacity.tau, workload=workload)
        running = sorted(views_of(state, state.running), key=lambda v: v.arrival_order)
        queue = list(running)
        gone: set[str] = set()
        for view in running:
            if not view.is_decoding or view.request_id in gone:
                continue
            if not builder.can_add():
                break
            if not add_or_preempt(builder, view, 1, queue, gone, fcfs_victim):
                break
        for view in queue:
            if not view.is_decoding and builder.can_add():
                builder.add(view)
        if gone:
            return builder.build()
        resumed = resume_suspended(builder, state)
        if resumed < len(state.suspended):
            return builder.build()
        max_seqs = workload.capacity.max_num_seqs or state.sequence_budget
        free_seqs = max_seqs - len(queue) - resumed
        for view in sorted(views_of(state, state.waiting), key=lambda v: v.arrival_order):
            if free_seqs <= 0 or not builder.can_add():
                break
            if not view.is_ready:
                continue
            if not builder.admit(view):
                break
            free_seqs -= 1
        return builder.build()
