"""SimulatedExecutor: completes every planned interval on a virtual clock.

It is the only online component allowed to hold :class:`HiddenTruth`: it
stops each request when its realized output length is reached (0x01A, 0x02).
Duration comes from an injected cost model; the default is one unit per
iteration (the ``iteration`` clock of the 0x02 fixtures).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Protocol

from iterserve.records.plan import IterationPlan
from iterserve.records.result import CompletedInterval, IterationResult
from iterserve.records.spec import HiddenTruth
from iterserve.records.state import SchedulerState
from iterserve.records.view import FinishReason, WorkKind


class CostModel(Protocol):
    def iteration_duration(self, plan: IterationPlan, state: SchedulerState) -> float: ...


class UnitIterationCost:
    """Every iteration takes one clock unit, whatever it holds (0x02)."""

    name = "unit-iteration"

    def iteration_duration(self, plan: IterationPlan, state: SchedulerState) -> float:
        return 1.0


class SimulatedExecutor:
    def __init__(self, hidden: HiddenTruth, cost_model: CostModel | None = None) -> None:
        self._realized = dict(hidden.realized_output_tokens)
        self._cost = cost_model or UnitIterationCost()

    def execute(self, plan: IterationPlan, state: SchedulerState) -> IterationResult:
        completed = []
        service: Counter[str] = Counter()
        views = state.views
        realized_of = self._realized
        for work in plan.work:
            view = views[work.request_id]
            kind = work.kind
            if kind is WorkKind.REBUILD:
                completed.append(CompletedInterval(work.request_id, work.generation, work.start,
                                                   work.end, False))
                continue
            service[view.client_id] += work.end - work.start
            if kind is WorkKind.PREFILL_CHUNK and work.end != view.num_prompt_tokens:
                completed.append(CompletedInterval(work.request_id, work.generation, work.start,
                                                   work.end, False))
                continue
            num_emitted = view.num_emitted + 1
            realized = realized_of.get(work.request_id)
            reason = None
            if realized is not None and realized <= num_emitted and (
                realized < view.max_output_tokens
            ):
                reason = FinishReason.STOP
            completed.append(CompletedInterval(work.request_id, work.generation, work.start,
                                               work.end, True, num_emitted, reason))
        return IterationResult(
            decision_id=plan.decision_id,
            input_state_version=plan.input_state_version,
            completed=tuple(completed),
            service=dict(service),
            duration=self._cost.iteration_duration(plan, state),
        )

    def release(self, request_ids: Iterable[str]) -> None:
        return None
