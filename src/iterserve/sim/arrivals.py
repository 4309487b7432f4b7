"""Arrival processes: the one home of how request arrival times are drawn.

The generated-workload processes (Poisson, Gamma, on-off, explicit) take the
numpy ``Generator`` they draw from and return ``n`` absolute times in
seconds from 0, non-decreasing. :func:`poisson_gap_s` is the same Poisson
process one gap at a time on a stdlib ``random.Random``, for the callers
whose draws interleave arrivals with other samples (the lab's Poisson
workloads, the sweep's rate trials, the random test workloads).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from iterserve.sim.distributions import _check


def poisson_gap_s(rng: random.Random, rate_per_s: float) -> float:
    """One exponential inter-arrival gap of mean ``1 / rate_per_s`` seconds."""
    return rng.expovariate(rate_per_s)


@dataclass(frozen=True, slots=True)
class PoissonArrivals:
    """Exponential gaps of mean 1 / rate_per_s."""

    rate_per_s: float

    def __post_init__(self) -> None:
        _check_rate(self.rate_per_s)

    def times_s(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.cumsum(rng.exponential(1.0 / self.rate_per_s, size=n))


@dataclass(frozen=True, slots=True)
class GammaArrivals:
    """Gamma gaps of mean 1 / rate_per_s and coefficient of variation ``cv``
    (shape 1/cv^2): cv = 1 is Poisson, cv > 1 is burstier."""

    rate_per_s: float
    cv: float

    def __post_init__(self) -> None:
        _check_rate(self.rate_per_s)
        _check(math.isfinite(self.cv) and self.cv > 0, "cv must be > 0")

    def times_s(self, rng: np.random.Generator, n: int) -> np.ndarray:
        shape = 1.0 / self.cv**2
        return np.cumsum(rng.gamma(shape, 1.0 / (self.rate_per_s * shape), size=n))


@dataclass(frozen=True, slots=True)
class OnOffArrivals:
    """Poisson at rate_per_s during ``on_s``-second periods separated by
    ``off_s`` seconds of silence, starting with an on period."""

    rate_per_s: float
    on_s: float
    off_s: float

    def __post_init__(self) -> None:
        _check_rate(self.rate_per_s)
        _check(math.isfinite(self.on_s) and self.on_s > 0, "on_s must be > 0")
        _check(math.isfinite(self.off_s) and self.off_s >= 0, "off_s must be >= 0")

    def times_s(self, rng: np.random.Generator, n: int) -> np.ndarray:
        on_time_s = np.cumsum(rng.exponential(1.0 / self.rate_per_s, size=n))
        num_periods = np.floor(on_time_s / self.on_s)
        return on_time_s + num_periods * self.off_s


@dataclass(frozen=True, slots=True)
class ExplicitArrivals:
    timestamps_s: tuple[float, ...]

    def __post_init__(self) -> None:
        _check(len(self.timestamps_s) >= 1, "needs at least one timestamp")
        _check(all(math.isfinite(t) and t >= 0 for t in self.timestamps_s),
               "timestamps must be finite and >= 0")
        _check(all(a <= b for a, b in zip(self.timestamps_s, self.timestamps_s[1:], strict=False)),
               "timestamps must be non-decreasing")

    def times_s(self, rng: np.random.Generator, n: int) -> np.ndarray:
        _check(n == len(self.timestamps_s), "num_requests must equal the number of timestamps")
        return np.asarray(self.timestamps_s, dtype=np.float64)


ArrivalProcess = PoissonArrivals | GammaArrivals | OnOffArrivals | ExplicitArrivals


def _check_rate(rate_per_s: float) -> None:
    _check(math.isfinite(rate_per_s) and rate_per_s > 0, "rate_per_s must be > 0")


