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

from iterserve.plan import PlanBuilder, PolicyContract, views_of
from iterserve.plan.feasibility import RunningSet
from iterserve.plan.passes import resume_then_admit, running_pass
from iterserve.plan.victims import VictimChooser, fcfs_victim, priority_victim
from iterserve.policies.policy import PolicyBase
from iterserve.policies.settings import count_settings
from iterserve.records.state import SchedulerState
from iterserve.records.view import RequestView

_CONTRACT = PolicyContract.parse("""
    granularity: iteration, token interval (frontier catch-up)
    protected_identity: request_id + generation + snapshot_version
    visible_state: running and waiting queues, computed/target frontiers, KV capacity facts
    decision_output: per-request rows; preemption (recompute) intents; admissions
    unknown_future: output lengths
    objective: throughput with bounded per-iteration tokens
    metric: throughput, TTFT, TBT
    assumptions: recompute preemption; no waiting pass after a running-path preemption
    foreign_owners: KV allocator (capacity facts), prefix cache
    source: vLLM v0.23.0 Scheduler.schedule (0fc695f); spec 0x09, 0x0D
""")


@count_settings
class VllmConfig:
    """``long_prefill_token_threshold``: most rows per request per iteration;
    ``max_num_seqs``: the running cap (else the sequence budget)."""

    long_prefill_token_threshold: int | None = None
    max_num_seqs: int | None = None


class VllmFrontier(PolicyBase[VllmConfig]):
    policy_id = "vllm"
    running_set = RunningSet.PREEMPTS
    tie_break_key: tuple[str, ...] = ("queue_rank", "arrival_order", "request_id",
                                      "request_generation")
    contract = _CONTRACT
    choose_victim: VictimChooser = staticmethod(fcfs_victim)

    def waiting_order(self, waiting: list[RequestView]) -> list[RequestView]:
        return waiting

    def ledgers(self) -> dict[str, int | None]:
        return {"max_num_seqs": self.config.max_num_seqs}

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        threshold = self.config.long_prefill_token_threshold

        def rows_of(view: RequestView) -> int:
            rows = min(builder.legal_rows(view), builder.tokens_left)
            return rows if threshold is None else min(rows, threshold)

        done = running_pass(builder, views_of(state, state.running), rows_of, self.choose_victim)
        if not done.gone:  # no waiting pass after a running-path preemption
            waiting = self.waiting_order(views_of(state, state.waiting))
            resume_then_admit(builder, state, waiting, rows_of, threshold)


class VllmPriority(VllmFrontier):
    """PRIORITY scheduling: waiting ordered by (priority, arrival); victims by
    max (priority, arrival)."""

    policy_id = "vllm-priority"
    tie_break_key: tuple[str, ...] = ("queue_rank", "priority_rank", "arrival_order",
                                      "request_id", "request_generation")
    choose_victim: VictimChooser = staticmethod(priority_victim)

    def waiting_order(self, waiting: list[RequestView]) -> list[RequestView]:
        return sorted(waiting, key=lambda v: (v.priority, v.arrival, v.arrival_order))
