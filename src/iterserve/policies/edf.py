"""Earliest deadline first, and the mechanism deadline policies share (0x07).

Deadlines are factual and never restart (0x07 "Consume M5.1 clocks"):

    first-token deadline = original arrival + TTFT limit     (nothing emitted)
    next-token deadline  = previous output emission + TBT limit  (a stream)

Limits come from each request's declared SLO (``RequestSpec.slo``); a
request without a limit for its current clock has an infinite deadline.
Times are put on seconds with the workload's clock: 1/1000 s per unit on
the ``ms`` clock; on the ``iteration`` clock one iteration is 1 s unless a
fixed-iteration cost model gives its length.

Selection ranks ready requests by (urgency, next-token before first-token,
arrival, request id, generation), urgency quantized to 1 ns so float noise
cannot break a declared tie, and gives each its legal interval while the
budgets allow. The urgency decides WHICH requests run; the plan records the
tie-break key ``(phase_rank, arrival, request_id, request_generation)`` and
lists its items in that order. A running request that does not fit the KV
ledger preempts the least urgent running requests, itself included, in the
run's preemption mode (workload ``kv.preemption_mode``); preserved requests
resume in rank order when their rows fit. Deadline order proves no
fairness property (0x09A owns that).
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple, Protocol, runtime_checkable

from iterserve.metrics.clocks import endpoint_deadline_s
from iterserve.metrics.slack import FixedIterationModel, IterationCostModel
from iterserve.policies.base import (
    PlanBuilder,
    Policy,
    PolicyConfigError,
    PolicyContract,
    add_or_preempt,
    views_of,
)
from iterserve.records.keys import key_function
from iterserve.records.plan import IterationPlan
from iterserve.records.spec import OnlineWorkload, SloTargets
from iterserve.records.state import SchedulerState
from iterserve.records.view import Lifecycle, RequestView

TIE_BREAK_KEY: tuple[str, ...] = ("phase_rank", "arrival", "request_id", "request_generation")
_MS_PER_S = 1000.0
_QUANTUM_DIGITS = 9  # urgency rounded to 1 ns


@runtime_checkable
class FixedIteration(Protocol):
    """A cost model whose every iteration lasts ``iteration_s``."""

    @property
    def iteration_s(self) -> float: ...


class DecisionClock(NamedTuple):
    """One decision's time facts: ``now_s``, seconds per clock unit, the
    named cost model and the most prefill rows one iteration can carry."""

    now_s: float
    seconds_per_unit: float
    cost_model: IterationCostModel
    max_prefill_rows: int


class DeadlineOrderedPolicy:
    """Ranks ready work by :meth:`urgency` (smaller runs first); subclasses
    say what urgency is. ``cost_model`` is the named model of 0x07; None
    means one clock unit per iteration (1 ms on the ``ms`` clock, 1 s on
    the ``iteration`` clock). ``contract_template``'s assumptions name it."""

    policy_id = "deadline"
    policy_version = "1"
    tie_break_key: tuple[str, ...] = TIE_BREAK_KEY
    contract_template: PolicyContract

    def __init__(self, cost_model: IterationCostModel | None = None) -> None:
        self.cost_model = cost_model
        model_text = "one clock unit per iteration" if cost_model is None else cost_model.model_id
        template = self.contract_template
        self.contract = dataclasses.replace(
            template, assumptions=template.assumptions.format(model=model_text))

    def with_cost_model(self, cost_model: IterationCostModel) -> DeadlineOrderedPolicy:
        return type(self)(cost_model)

    def urgency(self, view: RequestView, slo: SloTargets | None, clock: DecisionClock) -> float:
        raise NotImplementedError

    def choose(self, workload: OnlineWorkload, state: SchedulerState) -> IterationPlan:
        seconds = seconds_per_unit(workload.clock, self.cost_model, self.policy_id)
        clock = DecisionClock(state.now * seconds, seconds,
                              self.cost_model or FixedIterationModel(seconds), state.token_budget)
        key_of = key_function(self.tie_break_key, state)
        queued = state.running + state.suspended + state.waiting
        live = [view for view in views_of(state, queued) if view.is_ready]
        ranks = {
            view.request_id: (
                round(self.urgency(view, workload.spec(view.request_id).slo, clock),
                      _QUANTUM_DIGITS),
                *key_of(view),
            )
            for view in live
        }
        live.sort(key=lambda view: ranks[view.request_id])
        builder = PlanBuilder(self, state, workload=workload)
        schedule_ranked(builder, live)
        return builder.build()


def seconds_per_unit(clock: str, cost_model: object | None, policy_id: str) -> float:
    """Seconds in one unit of the workload's clock, as the module docstring says."""
    if clock == "ms":
        return 1.0 / _MS_PER_S
    if cost_model is None:
        return 1.0
    if isinstance(cost_model, FixedIteration):
        return cost_model.iteration_s
    raise PolicyConfigError(
        f"policy {policy_id!r} on the iteration clock needs a fixed-iteration cost model")


def deadline_s(view: RequestView, slo: SloTargets | None, seconds: float) -> float:
    """The request's current deadline in seconds; ``inf`` without a limit."""
    if slo is None:
        return math.inf
    last = view.last_output_time
    deadline = endpoint_deadline_s(
        view.arrival * seconds,
        None if view.num_emitted == 0 or last is None else last * seconds,
        ttft_limit_s=None if slo.ttft_ms is None else slo.ttft_ms / _MS_PER_S,
        tbt_limit_s=None if slo.tbt_ms is None else slo.tbt_ms / _MS_PER_S,
    )
    return math.inf if deadline is None else deadline


def schedule_ranked(builder: PlanBuilder, ranked: list[RequestView]) -> None:
    """Legal intervals in rank order: waiting requests are admitted and
    suspended ones resumed when they fit; running ones preempt the least
    urgent running requests (in the run's mode, 0x0C) on a KV shortfall,
    and the pass stops when one preempts itself (as vLLM's)."""
    victims = [view for view in ranked if view.lifecycle is Lifecycle.RUNNING]
    gone: set[str] = set()
    for view in ranked:
        if not builder.can_add():
            break
        if view.request_id in gone:
            continue
        if view.lifecycle is Lifecycle.WAITING:
            builder.admit(view)
        elif view.lifecycle is not Lifecycle.RUNNING:
            builder.resume(view)
        else:
            rows = min(builder.legal_rows(view), builder.tokens_left)
            if not add_or_preempt(builder, view, rows, victims, gone, _least_urgent):
                break


def _least_urgent(candidates: list[RequestView]) -> RequestView:
    return candidates[-1]


def bind_cost_model(policy: Policy, cost_model: IterationCostModel) -> Policy:
    """``policy`` using ``cost_model`` when it predicts with one (a deadline
    policy, ``mlfq``), else itself."""
    if isinstance(policy, DeadlineOrderedPolicy):
        return policy.with_cost_model(cost_model)
    with_cost_model = getattr(policy, "with_cost_model", None)
    if with_cost_model is None:
        return policy
    bound: Policy = with_cost_model(cost_model)
    return bound


class EarliestDeadlineFirst(DeadlineOrderedPolicy):
    """EDF: urgency is the current deadline (0x07). The cost model only
    fixes the iteration clock's length; EDF predicts nothing."""

    policy_id = "edf"
    contract_template = PolicyContract(
        granularity="iteration, token interval",
        protected_identity="request_id + generation + snapshot_version",
        visible_state="arrival, last output time, declared SLO limits, frontiers, KV facts",
        decision_output="ready work by earliest deadline; admissions; recompute preemption",
        unknown_future="output lengths",
        objective="meet first-token and next-token deadlines",
        metric="offered-load SLO attainment (0x07)",
        assumptions="deadlines from original arrival / previous output, never reset; "
                    "clock scale: {model}; no fairness property",
        foreign_owners="KV allocator (capacity facts); client SLO declarations",
        source="spec 0x07 deadline ordering (SCORPIO-style); not a runtime reproduction",
    )

    def urgency(self, view: RequestView, slo: SloTargets | None, clock: DecisionClock) -> float:
        return deadline_s(view, slo, clock.seconds_per_unit)
