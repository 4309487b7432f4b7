"""Whether a policy can finish a workload on a KV pool, decided before the
first decision (0x0C, 0x0E).

A policy with a preemption path (``RunningSet.PREEMPTS``) finishes on any
pool: a request whose next step can never fit the whole pool is aborted
(``exceeds_kv_capacity``, :class:`~iterserve.plan.builder.PlanBuilder`) and
every other one fits once the others are preempted. A policy without one
follows a source that assumes enough KV memory: it can finish only if the
pool holds the worst running set its rules allow, at its peak. That set is
what the policy declares (its ``running_set``):

- ``COHORT``: a cohort admitted at once from an empty pool, in arrival order,
  stopping at the first request that does not fit (``static``); members
  decode in lockstep and leave at ``max_output_tokens``;
- ``CAPPED``: at most ``max_num_seqs`` running requests (``refill``);
- ``UNBOUNDED``: any live request may hold memory at once (decodes can be
  left unscheduled while new requests are admitted).

Each request's peak is ``p + max_output_tokens - 1`` rows, capped at the pool
(it is aborted before it outgrows it); one whose prompt exceeds the pool
holds nothing. Declared lengths only: hidden truth never enters (0x06).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from iterserve.plan.contract import Policy
from iterserve.plan.preemption_cost import PreemptionCosts
from iterserve.records import frontier
from iterserve.records.preemption import PreemptionMode
from iterserve.records.spec import OnlineWorkload, RequestSpec
from iterserve.records.state import CapacityFacts, RunRules


class InfeasibleRun(ValueError):
    """The policy cannot finish this workload under these budgets and this KV
    pool. Raised by ``Engine(...)`` before the first decision; one line
    naming the policy, the need and the pool (``iterserve`` exits 2)."""


class RunningSet(enum.Enum):
    """Which requests a policy may hold in KV memory at once (module doc)."""

    PREEMPTS = "preempts"
    COHORT = "cohort"
    CAPPED = "capped"
    UNBOUNDED = "unbounded"


def check_run(policy: Policy, workload: OnlineWorkload, facts: CapacityFacts) -> None:
    """Raise :class:`InfeasibleRun` if ``policy`` cannot finish ``workload``
    on the pool ``facts`` describe; return otherwise."""
    budget = workload.capacity.max_num_batched_tokens
    if getattr(policy, "whole_prompt_prefill", False):
        too_long = [r for r in workload.requests if r.num_prompt_tokens > budget]
        if too_long:
            raise InfeasibleRun(
                f"policy {policy.policy_id!r} prefills whole prompts: request "
                f"{too_long[0].request_id!r} has {too_long[0].num_prompt_tokens} prompt tokens, "
                f"more than the token budget {budget}")
    _check_preemption_cost(workload)
    running_set = getattr(policy, "running_set", RunningSet.UNBOUNDED)
    if facts.num_blocks_total is None or running_set is RunningSet.PREEMPTS:
        return
    _check_any_fits(policy, workload, facts)
    need = worst_running_blocks(running_set, workload, facts)
    if need > facts.num_blocks_total:
        raise InfeasibleRun(
            f"policy {policy.policy_id!r} has no preemption path and its worst running set "
            f"({running_set.value}) needs {need} KV blocks; the pool has "
            f"{facts.num_blocks_total} (use a policy that preempts, e.g. vllm, or a larger pool)")


def _check_preemption_cost(workload: OnlineWorkload) -> None:
    """A run that chooses its preemption mode by cost parses its cost model
    before the first decision, not at its first preemption (0x0C)."""
    kv = workload.kv
    if kv is None or kv.preemption_mode is not PreemptionMode.CHEAPER:
        return
    try:
        PreemptionCosts.of(RunRules.of(workload))
    except ValueError as exc:
        raise InfeasibleRun(f"kv.preemption_cost.recompute_cost_model: {exc}") from None


def _check_any_fits(policy: Policy, workload: OnlineWorkload, facts: CapacityFacts) -> None:
    """A run in which every prompt is larger than the whole pool would cancel
    every request and report nothing done: refused, naming the smallest."""
    if not workload.requests or any(_fits_alone(spec, facts) for spec in workload.requests):
        return
    smallest = min(workload.requests, key=lambda spec: spec.num_prompt_tokens)
    raise InfeasibleRun(
        f"policy {policy.policy_id!r} has no preemption path and no request can ever run: "
        f"every prompt is larger than the KV pool (the smallest, {smallest.request_id!r}, "
        f"has {smallest.num_prompt_tokens} tokens: {facts.blocks_for(smallest.num_prompt_tokens)}"
        f" blocks; the pool has {facts.num_blocks_total})")


def worst_running_blocks(running_set: RunningSet, workload: OnlineWorkload,
                         facts: CapacityFacts) -> int:
    """An upper bound on the blocks the worst running set of ``running_set``
    holds at its peak (a static cohort is stepped only when its members'
    peaks together exceed the pool)."""
    requests = sorted(enumerate(workload.requests), key=lambda item: (item[1].arrival, item[0]))
    specs = [spec for _, spec in requests if _fits_alone(spec, facts)]
    if running_set is RunningSet.COHORT:
        return max((_cohort_peak(specs[start:], workload, facts) for start in range(len(specs))),
                   default=0)
    peaks = sorted((_peak_blocks(spec, facts) for spec in specs), reverse=True)
    if running_set is RunningSet.CAPPED:
        peaks = peaks[: workload.capacity.max_num_seqs]
    return sum(peaks)


def _fits_alone(spec: RequestSpec, facts: CapacityFacts) -> bool:
    """A prompt larger than the pool is aborted before it holds a block."""
    total = facts.num_blocks_total
    return total is None or facts.blocks_for(spec.num_prompt_tokens) <= total


def _rows_at(spec: RequestSpec, step: int, facts: CapacityFacts) -> int:
    """Blocks held after ``step`` decode steps past the prompt (capped at
    the peak, and at the pool: the request is aborted before outgrowing it)."""
    total = facts.num_blocks_total
    rows = frontier.rows_held_after_outputs(spec.num_prompt_tokens,
                                            min(step + 1, spec.max_output_tokens))
    if total is not None:
        rows = min(rows, total * facts.block_size)
    return facts.blocks_for(rows)


def _peak_blocks(spec: RequestSpec, facts: CapacityFacts) -> int:
    return _rows_at(spec, spec.max_output_tokens, facts)


def _cohort_peak(candidates: Sequence[RequestSpec], workload: OnlineWorkload,
                 facts: CapacityFacts) -> int:
    """Peak blocks of the cohort admitted from ``candidates`` (arrival order)
    into an empty pool: whole prompts while the token budget lasts, the
    last one possibly partial (it lags; counted at its growth bound and
    never leaving); full members leave after ``max_output_tokens - 1`` steps."""
    tokens = workload.capacity.max_num_batched_tokens
    seqs = workload.capacity.max_num_seqs
    free = facts.num_blocks_total or 0
    full: list[RequestSpec] = []
    partial: RequestSpec | None = None
    for spec in candidates:
        if tokens <= 0 or seqs <= 0:
            break
        rows = min(spec.num_prompt_tokens, tokens)
        if facts.blocks_for(rows) > free:
            break
        free -= facts.blocks_for(rows)
        tokens -= rows
        seqs -= 1
        if rows < spec.num_prompt_tokens:
            partial = spec
        else:
            full.append(spec)
    members = full if partial is None else [*full, partial]
    peak_sum = sum(_peak_blocks(spec, facts) for spec in members)
    if peak_sum <= (facts.num_blocks_total or 0):
        return peak_sum  # fits even at every member's peak at once: no need to step
    steps = sorted({spec.max_output_tokens - 1 for spec in full} | {1 << 62})
    worst = 0
    for step in steps:
        held = sum(_rows_at(spec, step, facts) for spec in full
                   if step <= spec.max_output_tokens - 1)
        if partial is not None:
            held += _rows_at(partial, step, facts)
        worst = max(worst, held)
    return worst
