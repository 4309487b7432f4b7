"""FIFO admission planning against the soft reservation ceiling (0x06).

``admit j iff R_{j-1} + A_hat_j <= C_soft`` with ``C_soft = C_hard - W``.
Selection stops at the first candidate that does not fit (head-of-line, as in
ORCA's Algorithm 1): a later, smaller request does not jump the queue. The
plan is pure: it reads only the online candidate view, reserves nothing
physical, and carries no allocation result.
"""

from __future__ import annotations

from collections.abc import Sequence

from iterserve.admission.estimators import ReservationEstimator
from iterserve.admission.records import (
    AdmissionCandidate,
    AdmissionDecision,
    AdmissionIntent,
    AdmissionPlan,
    AllocationRequest,
    ReservationBudget,
    ReservationEstimate,
    future_append_rows,
)


class IllegalWatermarkError(ValueError):
    """The watermark leaves no soft ceiling (``W > C_hard``)."""


def soft_ceiling_rows(hard_ceiling_rows: int, watermark_rows: int) -> int:
    """``C_soft = C_hard - W``; raises when W is negative or exceeds the hard ceiling."""
    if not 0 <= watermark_rows <= hard_ceiling_rows:
        raise IllegalWatermarkError(
            f"watermark {watermark_rows} rows outside [0, hard ceiling {hard_ceiling_rows}]")
    return hard_ceiling_rows - watermark_rows


def estimate_reservation(candidate: AdmissionCandidate, estimator: ReservationEstimator,
                         budget: ReservationBudget) -> ReservationEstimate:
    """The estimator's estimate of the candidate's future append rows and bytes (0x05)."""
    forecast = estimator.forecast_total_outputs(candidate)
    rows = future_append_rows(candidate, forecast)
    return ReservationEstimate(
        estimator.estimator_id, candidate.forecast.prediction_version, candidate.request_id,
        candidate.generation, forecast, rows, rows * budget.bytes_per_row,
        budget.hard_ceiling_rows, soft_ceiling_rows(budget.hard_ceiling_rows,
                                                    estimator.watermark_rows))


def plan_admission(candidates: Sequence[AdmissionCandidate], estimator: ReservationEstimator,
                   budget: ReservationBudget) -> AdmissionPlan:
    """Admit FIFO candidates while the running reservation fits the soft ceiling."""
    labels = [candidate.label for candidate in candidates]
    if len(set(labels)) != len(labels):
        raise ValueError(f"duplicate request generations among candidates: {labels}")
    soft = soft_ceiling_rows(budget.hard_ceiling_rows, estimator.watermark_rows)
    reserved = budget.reserved_rows
    blocked = False
    intents = []
    for candidate in candidates:
        estimate = estimate_reservation(candidate, estimator, budget)
        blocked = blocked or reserved + estimate.estimated_append_rows > soft
        request = None
        if not blocked:
            reserved += estimate.estimated_append_rows
            request = AllocationRequest(candidate.request_id, candidate.generation,
                                        budget.allocation_epoch, estimate.estimated_append_rows,
                                        estimate.estimated_append_bytes)
        decision = AdmissionDecision.DEFER_CAPACITY if blocked else AdmissionDecision.ADMIT
        intents.append(AdmissionIntent(candidate.request_id, candidate.generation, decision,
                                       estimate, request))
    return AdmissionPlan(estimator.estimator_id, budget.allocation_epoch, budget.reserved_rows,
                         reserved, budget.hard_ceiling_rows, soft, tuple(intents))
