"""Length distributions and arrival processes for generated workloads.

Every sampler takes the numpy ``Generator`` it draws from as an argument (no
global RNG, STYLE habit 5) and returns ``n`` values at once. Lengths are
integer token counts; arrival processes return absolute times in seconds from
0, non-decreasing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class FixedLength:
    value: int

    def __post_init__(self) -> None:
        _check(self.value >= 1, "value must be >= 1")

    @property
    def max_value(self) -> int:
        return self.value

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class UniformLength:
    """Integers in [min_value, max_value], both inclusive."""

    min_value: int
    max_value: int

    def __post_init__(self) -> None:
        _check(1 <= self.min_value <= self.max_value, "need 1 <= min <= max")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.min_value, self.max_value + 1, size=n, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class LognormalLength:
    """round(exp(N(ln median, sigma^2))), clipped to [min_value, max_value]."""

    median: float
    sigma: float
    min_value: int
    max_value: int

    def __post_init__(self) -> None:
        _check(math.isfinite(self.median) and self.median > 0, "median must be > 0")
        _check(math.isfinite(self.sigma) and self.sigma >= 0, "sigma must be >= 0")
        _check(1 <= self.min_value <= self.max_value, "need 1 <= min <= max")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raw = rng.lognormal(math.log(self.median), self.sigma, size=n)
        return np.clip(np.rint(raw), self.min_value, self.max_value).astype(np.int64)


@dataclass(frozen=True, slots=True)
class EmpiricalLength:
    """Uniform draws, with replacement, from observed lengths (for example a
    trace's column; see :mod:`iterserve.sim.traces`)."""

    values: tuple[int, ...]

    def __post_init__(self) -> None:
        _check(len(self.values) >= 1, "needs at least one value")
        _check(min(self.values) >= 1, "values must be >= 1")

    @property
    def max_value(self) -> int:
        return max(self.values)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values, dtype=np.int64), size=n, replace=True)


LengthDistribution = FixedLength | UniformLength | LognormalLength | EmpiricalLength


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


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)
