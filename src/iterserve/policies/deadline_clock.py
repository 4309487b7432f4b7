"""Deadline clocks for the deadline policies (0x07): seconds per unit of the
run's clock, each request's current deadline, and one decision's time facts.

Deadlines are factual and never restart: first-token deadline = original
arrival + TTFT limit (nothing emitted); next-token deadline = previous output
emission + TBT limit. The ``ms`` clock has 1/1000 s per unit; on the
``iteration`` clock one iteration is 1 s unless a fixed-iteration cost model
gives its length.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Protocol, runtime_checkable

from iterserve.metrics.clocks import endpoint_deadline_s
from iterserve.metrics.slack import IterationCostModel
from iterserve.policies.settings import PolicyConfigError
from iterserve.records.spec import SloTargets
from iterserve.records.view import RequestView

_MS_PER_S = 1000.0


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
