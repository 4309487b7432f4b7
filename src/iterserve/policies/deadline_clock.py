"""Deadline clocks for the deadline policies (0x07): the run's clock scale,
each request's current deadline, and one decision's time facts.

Deadlines are factual and never restart: first-token deadline = original
arrival + TTFT limit (nothing emitted); next-token deadline = previous output
emission + TBT limit. Seconds per clock unit come from the one helper,
:func:`iterserve.cost.seconds_per_clock_unit`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from iterserve.cost import MS_PER_S, CostModelError, IterationCostModel, seconds_per_clock_unit
from iterserve.metrics.clocks import endpoint_deadline_s
from iterserve.policies.settings import PolicyConfigError
from iterserve.records.spec import SloTargets
from iterserve.records.view import RequestView


class DecisionClock(NamedTuple):
    """One decision's time facts: ``now_s``, seconds per clock unit, the
    named cost model and the most prefill rows one iteration can carry."""

    now_s: float
    seconds_per_unit: float
    cost_model: IterationCostModel
    max_prefill_rows: int


def seconds_per_unit(clock: str, cost_model: IterationCostModel | None, policy_id: str) -> float:
    """Seconds in one unit of the workload's clock; a misfit names the policy."""
    try:
        return seconds_per_clock_unit(clock, cost_model)
    except CostModelError as exc:
        raise PolicyConfigError(f"policy {policy_id!r}: {exc}") from None


def deadline_s(view: RequestView, slo: SloTargets | None, seconds: float) -> float:
    """The request's current deadline in seconds; ``inf`` without a limit."""
    if slo is None:
        return math.inf
    last = view.last_output_time
    deadline = endpoint_deadline_s(
        view.arrival * seconds,
        None if view.num_emitted == 0 or last is None else last * seconds,
        ttft_limit_s=None if slo.ttft_ms is None else slo.ttft_ms / MS_PER_S,
        tbt_limit_s=None if slo.tbt_ms is None else slo.tbt_ms / MS_PER_S,
    )
    return math.inf if deadline is None else deadline
