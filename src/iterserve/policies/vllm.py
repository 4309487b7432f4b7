"""vLLM-shaped frontier catch-up (0x09, 0x0D; source: vLLM 0.32.0
``Scheduler.schedule``, pinned as facts in :mod:`iterserve.policies.vllm_pin`;
first written against v0.23.0). Not an exact runtime reproduction.

No phases: each request's computed frontier catches up to its target.
Running requests first, in running-queue order: work = min(target -
computed, long_prefill_token_threshold when set and more than one request
is running or waiting, remaining token budget).
On KV shortfall, preempt (FCFS: tail of running; PRIORITY: max of
(priority, arrival)) and recompute; if the request preempts itself the
running pass stops. After any running-path preemption there is no waiting
pass. Preserved (swapped-out) requests resume next, oldest suspension first;
then waiting requests (recomputing ones at the front) in queue order,
while max_num_seqs, the budget and KV allow; the first that does not fit
stops the pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from iterserve.plan import PlanBuilder, PolicyContract, views_of
from iterserve.plan.builder import iter_views
from iterserve.plan.feasibility import RunningSet
from iterserve.plan.kept_order import KeptOrder, Key
from iterserve.plan.passes import RowsOf, resume_then_admit, running_pass
from iterserve.plan.victims import VictimChooser, fcfs_victim, priority_victim
from iterserve.policies.policy import PolicyBase
from iterserve.policies.scheduler_rules import VLLM_RULES, check_cross_fields
from iterserve.policies.settings import PolicyConfigError, count_settings, flag, optional
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
        vLLM 0.32's defaults: whole-sequence admission (reserve_full_isl), no
        long_prefill_token_threshold for a lone request, opt-in adaptive threshold floor;
        declared deviation: (R2) a resumed request rebuilds to its target rows and decodes in a
        later step (vLLM recomputes p + e and samples in the same step)
    foreign_owners: KV allocator (capacity facts), prefix cache
    source: vLLM 0.32.0 Scheduler.schedule (pin: iterserve.policies.vllm_pin); spec 0x09, 0x0D
    denominator: generated tokens per second (throughput); per request (TTFT, TBT)
    premises: none (a source implementation, not a paper objective or theorem)
    evidence_class: simulated or measured here (iterserve); never source-reported
    source_version: vllm 0.32.0 wheel, v1/core/sched/scheduler.py sha256 d9a39870
    non_claims: not an exact runtime reproduction; no async scheduling, speculative decoding,
        structured output, LoRA, encoder inputs or KV connectors
""")


@count_settings
class VllmConfig:
    """vLLM 0.32's scheduler settings, at its defaults (markers in
    :data:`~iterserve.policies.vllm_pin.POLICY_PIN`).

    ``long_prefill_token_threshold``: most rows per request per iteration,
    not applied when one request is running or waiting (nobody to starve)
    unless ``long_prefill_token_threshold_caps_lone_request`` is 1 (not a
    vLLM setting: iterserve's earlier rule); ``long_prefill_token_threshold_adaptive``
    (opt-in) floors it at ``max_num_batched_tokens // (running + waiting)``;
    ``max_num_seqs``: the running cap (else the sequence budget);
    ``max_num_batched_tokens``: tightens the iteration token budget;
    ``reserve_full_isl`` (vLLM's ``scheduler_reserve_full_isl``, on): admit a
    waiting request only when its whole sequence (prompt plus outputs so
    far) fits the free KV blocks, else only its first chunk must fit;
    ``enable_chunked_prefill`` (on): off, the waiting pass stops at a
    request whose rows (after the threshold) exceed the tokens left;
    ``max_num_partial_prefills`` (v0.23.0; vLLM V1 limits nothing with it):
    above 1 with no threshold, the threshold is 4 % of ``max_model_len``;
    ``max_model_len``: the model length the rules check against (unset:
    not checked). Cross-field rules:
    :data:`~iterserve.policies.scheduler_rules.VLLM_RULES`."""

    long_prefill_token_threshold: int | None = None
    long_prefill_token_threshold_adaptive: int = flag(default=0)
    long_prefill_token_threshold_caps_lone_request: int = flag(default=0)
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    reserve_full_isl: int = flag(default=1)
    enable_chunked_prefill: int = flag(default=1)
    max_num_partial_prefills: int = 1
    max_model_len: int | None = optional(
        "unset: the rules relating it (SC3, SC4) are not checked", default=None)

    def check_fields(self) -> None:
        check_cross_fields(self, VLLM_RULES)
        if self.max_num_partial_prefills > 1 and self.max_model_len is None and (
                self.long_prefill_token_threshold is None):
            raise PolicyConfigError(
                "setting max_num_partial_prefills: above 1 without long_prefill_token_threshold "
                "needs max_model_len (the threshold is 4% of it)")

    def configured_threshold(self) -> int | None:
        """The threshold as set, or v0.23.0's default for concurrent partial
        prefills (``int(max_model_len * 0.04)``; 0 means none)."""
        threshold = self.long_prefill_token_threshold
        if threshold is None and self.max_num_partial_prefills > 1 and self.max_model_len:
            threshold = int(self.max_model_len * 0.04) or None
        return threshold

    def step_threshold(self, num_eligible: int, input_budget: int) -> int | None:
        """The threshold this step (vLLM 0.32 ``Scheduler.schedule``): none
        for a lone request, floored at a fair share of the input budget
        when adaptive. ``num_eligible`` is running + waiting, as vLLM's
        ``get_request_counts``; a preserved (swapped-out) request counts as
        waiting (vLLM has no swap: its preempted requests wait)."""
        threshold = self.configured_threshold()
        if threshold is None or (num_eligible <= 1
                                 and not self.long_prefill_token_threshold_caps_lone_request):
            return None
        if self.long_prefill_token_threshold_adaptive:
            threshold = max(threshold, input_budget // max(num_eligible, 1))
        return threshold


class VllmFrontier(PolicyBase[VllmConfig]):
    policy_id = "vllm"
    running_set = RunningSet.PREEMPTS
    tie_break_key: tuple[str, ...] = ("queue_rank", "arrival_order", "request_id",
                                      "request_generation")
    contract = _CONTRACT
    choose_victim: VictimChooser = staticmethod(fcfs_victim)

    def waiting_order(self, state: SchedulerState) -> Iterable[RequestView]:
        """The waiting views, ready or not, in the order the waiting pass
        reads them (lazily: the pass stops at its first misfit)."""
        return iter_views(state, state.waiting)

    def ledgers(self) -> dict[str, int | None]:
        return {"max_running": self.config.max_num_seqs,
                "max_num_batched_tokens": self.config.max_num_batched_tokens}

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        num_eligible = len(state.running) + len(state.waiting) + len(state.suspended)
        threshold = self.config.step_threshold(num_eligible, builder.tokens_left)

        rows_of = (builder.rows_within_tokens if threshold is None  # one call less per row
                   else _capped(builder.rows_within_tokens, threshold))
        # read lazily; taken at every decision so that a kept order follows
        # each state, those that preempt included
        waiting = self.waiting_order(state)
        done = running_pass(builder, views_of(state, state.running), rows_of, self.choose_victim)
        if not done.gone:  # no waiting pass after a running-path preemption
            if not self.config.enable_chunked_prefill:
                waiting = _whole_prompts(builder, waiting, threshold)
            resume_then_admit(builder, state, waiting, rows_of, threshold,
                              full_isl=self.config.reserve_full_isl == 1)


def _capped(rows_of: RowsOf, max_rows: int) -> RowsOf:
    """``rows_of`` capped at ``max_rows`` (long_prefill_token_threshold)."""
    return lambda view: min(rows_of(view), max_rows)


def _whole_prompts(builder: PlanBuilder, waiting: Iterable[RequestView],
                   threshold: int | None) -> Iterator[RequestView]:
    """``waiting`` up to the first ready request whose rows (capped by the
    threshold, not by the budget) exceed the tokens left, read lazily so
    each check sees the admissions before it: vLLM without chunked
    prefill stops its waiting pass there."""
    for view in waiting:
        rows = builder.legal_rows(view)
        if threshold is not None:
            rows = min(rows, threshold)
        if view.is_ready and not builder.is_aborted(view) and rows > builder.tokens_left:
            return
        yield view


class VllmPriority(VllmFrontier):
    """PRIORITY scheduling: waiting ordered by (priority, arrival); victims by
    max (priority, arrival). The waiting order is kept across decisions
    (vLLM keeps a heap), so a decision reads only what its pass reaches."""

    policy_id = "vllm-priority"
    tie_break_key: tuple[str, ...] = ("queue_rank", "priority_rank", "arrival_order",
                                      "request_id", "request_generation")
    choose_victim: VictimChooser = staticmethod(priority_victim)
    keeps_order = True  # the waiting queue's priority order is kept across decisions

    def __init__(self, config: VllmConfig | None = None) -> None:
        super().__init__(config)
        self.kept_waiting = KeptOrder(ready_only=False)  # the pass reads requests not ready too

    def waiting_order(self, state: SchedulerState) -> Iterable[RequestView]:
        self.kept_waiting.sync(state, _priority_arrival_key)
        return self.kept_waiting.views(state)


def _priority_arrival_key(view: RequestView) -> Key:
    return (view.priority, view.arrival, view.arrival_order, view.request_id, view.generation)
