"""vLLM-shaped frontier catch-up (0x09, 0x0D; source: vLLM v0.23.0
``Scheduler.schedule``). Not an exact runtime reproduction.

No phases: each request's computed frontier catches up to its target.
Running requests first, in running-queue order: work = min(target -
computed, long_prefill_token_threshold when set, remaining token budget).
On KV shortfall, preempt (FCFS: tail of running; PRIORITY: max of
(priority, arrival)) and recompute; if the request preempts itself the
running pass stops. After any running-path preemption there is no waiting
pass. Preserved (swapped-out) requests resume next, oldest suspension first;
then waiting requests (recomputing ones at the front) in queue order,
while max_num_seqs, the budget and KV allow; the first that does not fit
stops the pass.
"""

from __future__ import annotations

from iterserve.policies.base import (
    PlanBuilder,
    PolicyContract,
    VictimChooser,
    add_or_preempt,
    fcfs_victim,
    priority_victim,
    resume_suspended,
    views_of,
)
from iterserve.records.plan import IterationPlan
from iterserve.records.spec import OnlineWorkload
from iterserve.records.state import SchedulerState
from iterserve.records.view import RequestView

_CONTRACT = PolicyContract(
    granularity="iteration, token interval (frontier catch-up)",
    protected_identity="request_id + generation + snapshot_version",
    visible_state="running and waiting queues, computed/target frontiers, KV capacity facts",
    decision_output="per-request rows; preemption (recompute) intents; admissions",
    unknown_future="output lengths",
    objective="throughput with bounded per-iteration tokens",
    metric="throughput, TTFT, TBT",
    assumptions="recompute preemption; no waiting pass after a running-path preemption",
    foreign_owners="KV allocator (capacity facts), prefix cache",
    source="vLLM v0.23.0 Scheduler.schedule (0fc695f); spec 0x09, 0x0D",
)


class VllmFrontier:
    policy_id = "vllm"
    policy_version = "1"
    tie_break_key: tuple[str, ...] = ("queue_rank", "arrival_order", "request_id",
                                      "request_generation")
    contract = _CONTRACT
    choose_victim: VictimChooser = staticmethod(fcfs_victim)

    def waiting_order(self, waiting: list[RequestView]) -> list[RequestView]:
        return waiting

    def choose(self, workload: OnlineWorkload, state: SchedulerState) -> IterationPlan:
        builder = PlanBuilder(self, state, workload=workload)
        threshold = workload.capacity.long_prefill_token_threshold
        running = views_of(state, state.running)
        preempted = self._running_pass(builder, running, threshold)
        if not preempted:
            max_seqs = workload.capacity.max_num_seqs or state.sequence_budget
            resumed = resume_suspended(builder, state, threshold)
            if resumed == len(state.suspended):  # preserved requests go before new work
                waiting = self.waiting_order(views_of(state, state.waiting))
                free_seqs = max_seqs - len(running) - resumed
                self._waiting_pass(builder, waiting, threshold, free_seqs)
        return builder.build()

    def _rows(self, builder: PlanBuilder, view: RequestView, threshold: int | None) -> int:
        rows = min(builder.legal_rows(view), builder.tokens_left)
        return rows if threshold is None else min(rows, threshold)

    def _running_pass(self, builder: PlanBuilder, running: list[RequestView],
                      threshold: int | None) -> bool:
        queue = list(running)
        gone: set[str] = set()  # victims preempted earlier in this pass
        for view in running:
            if view.request_id in gone:
                continue
            rows = self._rows(builder, view, threshold)
            if rows <= 0 or builder.seqs_left == 0:
                break
            if not add_or_preempt(builder, view, rows, queue, gone, self.choose_victim):
                break
        return bool(gone)

    def _waiting_pass(self, builder: PlanBuilder, waiting: list[RequestView],
                      threshold: int | None, num_free_seqs: int) -> None:
        for view in waiting:
            if num_free_seqs <= 0 or not builder.can_add():
                break
            rows = self._rows(builder, view, threshold)
            if not view.is_ready:
                continue
            if not builder.fits_memory(view, rows) or not builder.admit(view, rows):
                break
            num_free_seqs -= 1


class VllmPriority(VllmFrontier):
    """PRIORITY scheduling: waiting ordered by (priority, arrival); victims by
    max (priority, arrival)."""

    policy_id = "vllm-priority"
    tie_break_key: tuple[str, ...] = ("queue_rank", "priority_rank", "arrival_order",
                                      "request_id", "request_generation")
    choose_victim: VictimChooser = staticmethod(priority_victim)

    def waiting_order(self, waiting: list[RequestView]) -> list[RequestView]:
        return sorted(waiting, key=lambda v: (v.priority, v.arrival, v.arrival_order))
