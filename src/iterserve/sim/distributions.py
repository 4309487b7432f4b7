"""Length distributions for generated workloads (arrival processes: :mod:`iterserve.sim.arrivals`).

Every sampler takes the numpy ``Generator`` it draws from as an argument (no
global RNG, STYLE habit 5) and returns ``n`` values at once. Lengths are
integer token counts.
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


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)
