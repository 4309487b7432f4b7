"""Reservation estimators: maximum, point, quantile, watermark (0x06).

These are estimators, not scheduling policies (``iterserve.policies`` holds
those). An estimator answers two questions only: the forecast total outputs G_hat for a
candidate, and the rows W it holds back from ordinary admission. Maximum,
point and quantile change the forecast; the watermark changes the ceiling
(``C_soft = C_hard - W``) around another family's forecast. None of them sees
realized lengths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from iterserve.admission.records import AdmissionCandidate


class ReservationEstimator(Protocol):
    """What :func:`iterserve.admission.planner.plan_admission` needs from an estimator."""

    @property
    def estimator_id(self) -> str: ...

    @property
    def watermark_rows(self) -> int: ...

    def forecast_total_outputs(self, candidate: AdmissionCandidate) -> int: ...


@dataclass(frozen=True, slots=True)
class MaximumEstimator:
    """ORCA-style bound: G_hat = max_tokens. Conservative; pays in rejected concurrency."""

    estimator_id: str = "max"
    watermark_rows: int = 0

    def forecast_total_outputs(self, candidate: AdmissionCandidate) -> int:
        return candidate.max_tokens


@dataclass(frozen=True, slots=True)
class PointEstimator:
    """Optimistic point forecast; pays in recovery (extension, preemption) tails."""

    estimator_id: str = "point"
    watermark_rows: int = 0

    def forecast_total_outputs(self, candidate: AdmissionCandidate) -> int:
        return candidate.forecast.point_total_outputs


@dataclass(frozen=True, slots=True)
class QuantileEstimator:
    """Per-request quantile forecast; not a cohort guarantee when errors correlate."""

    quantile: float = 0.9
    watermark_rows: int = 0

    @property
    def estimator_id(self) -> str:
        return f"quantile:p{self.quantile * 100:g}"

    def forecast_total_outputs(self, candidate: AdmissionCandidate) -> int:
        return candidate.forecast.total_outputs_at(self.quantile)


@dataclass(frozen=True, slots=True)
class WatermarkEstimator:
    """Another family's forecast under a soft ceiling ``C_hard - watermark_rows``.

    The watermark is shared recovery space, not request-owned reservation.
    """

    base: ReservationEstimator
    watermark_rows: int

    def __post_init__(self) -> None:
        if self.watermark_rows < 0:
            raise ValueError(f"watermark_rows must be >= 0, got {self.watermark_rows}")
        if self.base.watermark_rows:
            raise ValueError("the base estimator of a watermark must not hold its own watermark")

    @property
    def estimator_id(self) -> str:
        return f"watermark:{self.base.estimator_id}:w{self.watermark_rows}"

    def forecast_total_outputs(self, candidate: AdmissionCandidate) -> int:
        return self.base.forecast_total_outputs(candidate)
