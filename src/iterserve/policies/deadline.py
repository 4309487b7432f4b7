"""The mechanism the deadline policies share (0x07): deadlines, the clock
scale, the cost-model binding and ranked selection.

Deadlines are factual and never restart (0x07 "Consume M5.1 clocks"):

    first-token deadline = original arrival + TTFT limit     (nothing emitted)
    next-token deadline  = previous output emission + TBT limit  (a stream)

Limits come from each request's declared SLO (on its view); a request
without a limit for its current clock has an infinite deadline. Times are
put on seconds with the run's clock (``state.rules.clock``): 1/1000 s per
unit on the ``ms`` clock; on the ``iteration`` clock one iteration is 1 s
unless a fixed-iteration cost model gives its length.

Selection ranks ready requests by (urgency, then the tie-break key),
urgency quantized to 1 ns so float noise cannot break a declared tie, and
gives each its legal interval while the budgets allow
(:func:`iterserve.plan.passes.schedule_ranked`). The plan records the
tie-break key ``(phase_rank, arrival, request_id, request_generation)``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

from iterserve.metrics.clocks import endpoint_deadline_s
from iterserve.metrics.slack import FixedIterationModel, IterationCostModel
from iterserve.plan import PlanBuilder, Policy, PolicyContract, views_of
from iterserve.plan.passes import schedule_ranked
from iterserve.policies.policy import PolicyBase
from iterserve.policies.settings import PolicyConfigError
from iterserve.records.keys import key_function
from iterserve.records.spec import SloTargets
from iterserve.records.state import SchedulerState
from iterserve.records.view import RequestView

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


@dataclass(frozen=True, slots=True)
class DeadlineConfig:
    """``cost_model``: the named iteration-cost model of 0x07 (bound from the
    run's cost model); None is one clock unit per iteration."""

    cost_model: IterationCostModel | None = None

    def __post_init__(self) -> None:
        model = self.cost_model
        if model is not None and not isinstance(model, IterationCostModel):
            raise PolicyConfigError(f"setting cost_model: not an iteration cost model: {model!r}")


class DeadlineOrderedPolicy(PolicyBase[DeadlineConfig]):
    """Ranks ready work by :meth:`urgency` (smaller runs first); subclasses
    say what urgency is. ``cost_model`` is the named model of 0x07; None
    means one clock unit per iteration (1 ms on the ``ms`` clock, 1 s on
    the ``iteration`` clock). ``contract_template``'s assumptions name it."""

    policy_id = "deadline"
    tie_break_key: tuple[str, ...] = TIE_BREAK_KEY
    contract_template: PolicyContract


    def __init__(self, config: DeadlineConfig | None = None) -> None:
        self.config = DeadlineConfig() if config is None else config
        cost_model = self.cost_model = self.config.cost_model
        model_text = "one clock unit per iteration" if cost_model is None else cost_model.model_id
        template = self.contract_template
        self.contract = dataclasses.replace(
            template, assumptions=template.assumptions.format(model=model_text))

    def with_cost_model(self, cost_model: IterationCostModel) -> DeadlineOrderedPolicy:
        return type(self)(DeadlineConfig(cost_model))

    def urgency(self, view: RequestView, slo: SloTargets | None, clock: DecisionClock) -> float:
        raise NotImplementedError

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        seconds = seconds_per_unit(state.rules.clock, self.cost_model, self.policy_id)
        clock = DecisionClock(state.now * seconds, seconds,
                              self.cost_model or FixedIterationModel(seconds), state.token_budget)
        key_of = key_function(self.tie_break_key, state)
        queued = state.running + state.suspended + state.waiting
        live = [view for view in views_of(state, queued) if view.is_ready]
        ranks = {
            view.request_id: (
                round(self.urgency(view, view.slo, clock), _QUANTUM_DIGITS),
                *key_of(view),
            )
            for view in live
        }
        live.sort(key=lambda view: ranks[view.request_id])
        schedule_ranked(builder, live)


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


def bind_cost_model(policy: Policy, cost_model: IterationCostModel) -> Policy:
    """``policy`` using ``cost_model`` when it is a deadline policy, else itself."""
    if isinstance(policy, DeadlineOrderedPolicy):
        return policy.with_cost_model(cost_model)
    return policy
