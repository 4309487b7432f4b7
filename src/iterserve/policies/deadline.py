"""The mechanism the deadline policies share (0x07): the config binding the
run's cost model, and selection by urgency.

A subclass says what urgency is (:meth:`DeadlineOrderedPolicy.urgency`,
smaller runs first); deadlines and the clock scale come from
:mod:`iterserve.policies.deadline_clock`, the SLO limits from each view.
Ready requests rank by (urgency, then the tie-break key), urgency quantized
to 1 ns so float noise cannot break a declared tie, and each gets its legal
interval while the budgets allow (:func:`iterserve.plan.passes.schedule_ranked`).
Urgency is a function of the view alone (never of ``now``): the waiting
requests' ranks are then kept across decisions
(:class:`~iterserve.plan.kept_order.KeptOrder`), re-ranked only when their
view changes.
The plan records the tie-break key ``(phase_rank, arrival, request_id,
request_generation)``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from operator import itemgetter

from iterserve.cost import IterationCostModel, default_cost_model
from iterserve.plan import PlanBuilder, Policy, PolicyContract, views_of
from iterserve.plan.feasibility import RunningSet
from iterserve.plan.kept_order import KeptOrder, KeptRanks
from iterserve.plan.passes import schedule_ranked
from iterserve.policies.deadline_clock import DecisionClock, seconds_per_unit
from iterserve.policies.policy import PolicyBase
from iterserve.policies.settings import PolicyConfigError
from iterserve.records.keys import key_function
from iterserve.records.spec import SloTargets
from iterserve.records.state import RunRules, SchedulerState
from iterserve.records.view import RequestView

TIE_BREAK_KEY: tuple[str, ...] = ("phase_rank", "arrival", "request_id", "request_generation")
_QUANTUM_DIGITS = 9  # urgency rounded to 1 ns


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
    running_set = RunningSet.PREEMPTS
    keeps_order = True  # the waiting queue's rank order is kept across decisions
    tie_break_key: tuple[str, ...] = TIE_BREAK_KEY
    contract_template: PolicyContract

    def __init__(self, config: DeadlineConfig | None = None) -> None:
        self.config = DeadlineConfig() if config is None else config
        self.kept_waiting = KeptOrder()
        cost_model = self.cost_model = self.config.cost_model
        model_text = "one clock unit per iteration" if cost_model is None else cost_model.model_id
        template = self.contract_template
        self.contract = dataclasses.replace(
            template, assumptions=template.assumptions.format(model=model_text))

    def with_cost_model(self, cost_model: IterationCostModel) -> DeadlineOrderedPolicy:
        return type(self)(DeadlineConfig(cost_model))

    def check_rules(self, rules: RunRules) -> None:
        seconds_per_unit(rules.clock, self.cost_model, self.policy_id)

    def urgency(self, view: RequestView, slo: SloTargets | None, clock: DecisionClock) -> float:
        """A function of the view and the run's clock scale, never of
        ``clock.now_s`` (waiting ranks are kept across decisions)."""
        raise NotImplementedError

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        seconds = seconds_per_unit(state.rules.clock, self.cost_model, self.policy_id)
        clock = DecisionClock(state.now * seconds, seconds,
                              self.cost_model or default_cost_model(state.rules.clock),
                              state.max_num_batched_tokens)
        key_of = key_function(self.tie_break_key, state)

        def rank(view: RequestView) -> tuple[object, ...]:
            return (round(self.urgency(view, view.slo, clock), _QUANTUM_DIGITS), *key_of(view))

        others = sorted(((rank(view), view) for view in views_of(
            state, state.running + state.suspended) if view.is_ready), key=itemgetter(0))
        kept = self.kept_waiting
        kept.sync(state, rank, (self.config, state.rules.clock, seconds, state.max_num_batched_tokens))
        schedule_ranked(builder, others, KeptRanks(kept, state, kept.bisect))


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
