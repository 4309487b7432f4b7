"""Admission under output uncertainty as a screen on ``PlanBuilder.admit`` (0x06).

The run's ``kv.admission`` names the estimate (``max``, ``point``,
``quantile``, ``watermark:W``). A waiting request is admitted only while the
reserved rows of the running requests (committed rows plus their estimated
future rows) plus the candidate's estimate, U + max(G_hat - 1, 0), fit the
ceiling (the soft ceiling C_hard - W for the watermark family). This is a
reservation, not an allocation: the block manager still publishes what
physically exists (0x00D). Forecasts come from the request declarations
(``output_forecast``, ``output_forecast_p90``); max_output_tokens stands in
when a request declares none; they travel on the views. Never hidden truth.
"""

from __future__ import annotations

from iterserve.admission.planner import soft_ceiling_rows
from iterserve.admission.policies import AdmissionPolicy
from iterserve.admission.records import (
    AdmissionCandidate,
    OutputForecast,
    QuantileForecast,
    future_append_rows,
)
from iterserve.admission.registry import AdmissionPolicyConfig, build_admission_policy
from iterserve.records.state import SchedulerState
from iterserve.records.view import RequestView


def parse_admission(name: str) -> AdmissionPolicy | None:
    """``none`` | ``max`` | ``point`` | ``quantile`` | ``watermark:W`` (W rows)."""
    if name == "none":
        return None
    family, _, arg = name.partition(":")
    if family == "watermark":
        return build_admission_policy(AdmissionPolicyConfig("watermark", watermark_rows=int(arg or 0)))
    return build_admission_policy(AdmissionPolicyConfig(family))


class ReservationScreen:
    __slots__ = ("_policy", "_soft_rows", "reserved_rows")

    def __init__(self, state: SchedulerState, policy: AdmissionPolicy, hard_rows: int) -> None:
        self._policy = policy
        self._soft_rows = soft_ceiling_rows(hard_rows, policy.watermark_rows)
        self.reserved_rows = sum(
            view.num_computed + self.future_rows(view)
            for view in (state.views[rid] for rid in state.running + state.suspended)
        )

    @classmethod
    def for_state(cls, state: SchedulerState) -> ReservationScreen | None:
        """The screen of the run's ``kv.admission`` (``state.rules``), or None
        without one or without a bounded pool."""
        facts = state.capacity
        if state.rules.admission == "none" or facts.num_blocks_total is None:
            return None
        policy = parse_admission(state.rules.admission)
        if policy is None:
            return None
        return cls(state, policy, facts.num_blocks_total * facts.block_size)

    @staticmethod
    def candidate(view: RequestView) -> AdmissionCandidate:
        """The admission candidate for a view: declared forecasts, capped at
        max_output_tokens (which stands in when none is declared)."""
        cap = view.max_output_tokens
        point = min(cap, max(1, round(view.output_forecast or cap)))
        p90 = min(cap, max(point, round(view.output_forecast_p90 or cap)))
        forecast = OutputForecast("declared", point, (QuantileForecast(0.9, p90),))
        return AdmissionCandidate(
            view.request_id, view.generation, -view.priority, view.num_prompt_tokens,
            view.num_prompt_tokens, min(view.num_emitted, cap), cap, forecast,
        )

    def future_rows(self, view: RequestView) -> int:
        candidate = self.candidate(view)
        return future_append_rows(candidate, self._policy.forecast_total_outputs(candidate))

    def fits(self, view: RequestView) -> bool:
        return self.reserved_rows + view.num_computed + self.future_rows(view) <= self._soft_rows

    def reserve(self, view: RequestView) -> None:
        self.reserved_rows += view.num_computed + self.future_rows(view)
