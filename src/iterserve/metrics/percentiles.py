"""Nearest-rank percentiles with a sample gate (0x07, F39).

Estimator: Q_p = x_(ceil(p n / 100)), the k-th smallest observed sample, with
exact rational arithmetic so that 95 % of 20 is rank 19, not 18.999....

Gate: a percentile is reported only with at least one sample per tail
interval, n >= ceil(100 / (100 - p)):

    p50 -> n >= 2,   p95 -> n >= 20,   p99 -> n >= 100

Below its gate the value is withheld as ``{"status": "insufficient_sample",
"n": n}``. The gate is a transparency rule, not a confidence interval. The mean
is always reported when n >= 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from iterserve.metrics.counted_sample import CountedSample

OK = "ok"
INSUFFICIENT_SAMPLE = "insufficient_sample"
REPORTED_PERCENTS: tuple[int, ...] = (50, 95, 99)


@dataclass(frozen=True, slots=True)
class Percentile:
    """One gated percentile. ``value`` is ``None`` unless ``status == "ok"``."""

    percent: float
    n: int
    status: str
    value: float | None

    def to_dict(self, scale: float = 1.0) -> dict[str, Any]:
        if self.value is None:
            return {"status": self.status, "n": self.n}
        return {"status": self.status, "n": self.n, "value": self.value * scale}


@dataclass(frozen=True, slots=True)
class Summary:
    """Mean and gated p50/p95/p99 of one sample."""

    n: int
    mean: float | None
    percentiles: tuple[Percentile, ...]

    def to_dict(self, scale: float = 1.0) -> dict[str, Any]:
        record: dict[str, Any] = {
            "n": self.n,
            "mean": None if self.mean is None else self.mean * scale,
        }
        for percentile in self.percentiles:
            record[f"p{percentile.percent:g}"] = percentile.to_dict(scale)
        return record


def min_sample_size(percent: float) -> int:
    """Smallest n at which ``percent`` is reported: ceil(100 / (100 - p))."""
    exact = _exact(percent)
    return math.ceil(Fraction(100) / (100 - exact))


Ascending = Sequence[float] | NDArray[np.float64] | CountedSample


def nearest_rank(sorted_samples: Ascending, percent: float) -> float:
    """x_(ceil(p n / 100)) of an ascending, non-empty sample (ungated)."""
    if not len(sorted_samples):
        raise ValueError("nearest_rank needs at least one sample")
    rank = math.ceil(_exact(percent) * len(sorted_samples) / 100)
    return float(sorted_samples[max(rank, 1) - 1])


def gated_percentile(sorted_samples: Ascending, percent: float) -> Percentile:
    """Nearest-rank percentile, withheld below :func:`min_sample_size`."""
    n = len(sorted_samples)
    if n < min_sample_size(percent):
        return Percentile(percent=percent, n=n, status=INSUFFICIENT_SAMPLE, value=None)
    return Percentile(percent=percent, n=n, status=OK, value=nearest_rank(sorted_samples, percent))


def summarize(samples: Iterable[float] | NDArray[np.float64] | CountedSample,
              percents: Sequence[float] = REPORTED_PERCENTS) -> Summary:
    """Mean (n >= 1) and gated percentiles of a sample, in the sample's unit.
    The sample becomes one float64 array (an ascending one is used as is; a
    :class:`CountedSample` is read as the array it stands for); the mean is
    ``math.fsum``'s correctly rounded sum, whatever the order."""
    if isinstance(samples, CountedSample):
        if not np.isfinite(samples.values).all():
            raise ValueError("samples must be finite")
        return Summary(n=len(samples), mean=samples.mean(), percentiles=tuple(
            gated_percentile(samples, percent) for percent in percents))
    ordered = _ascending_array(samples)
    if not np.isfinite(ordered).all():
        raise ValueError("samples must be finite")
    mean = math.fsum(ordered.data) / len(ordered) if len(ordered) else None
    return Summary(
        n=len(ordered),
        mean=mean,
        percentiles=tuple(gated_percentile(ordered, percent) for percent in percents),
    )


def _ascending_array(samples: Iterable[float] | NDArray[np.float64]) -> NDArray[np.float64]:
    if isinstance(samples, np.ndarray) and samples.dtype == np.float64 and samples.ndim == 1:
        if len(samples) < 2 or bool((samples[:-1] <= samples[1:]).all()):
            return np.ascontiguousarray(samples)
        return np.sort(samples)
    ordered = np.fromiter(samples, dtype=np.float64)
    ordered.sort()
    return ordered


def _exact(percent: float) -> Fraction:
    exact = Fraction(str(percent))
    if not 0 < exact < 100:
        raise ValueError(f"percent must lie in (0, 100), got {percent}")
    return exact
