"""How a run's times are shown: seconds, or iterations.

On the ``iteration`` clock a second is a modelling convention (one iteration
is ``seconds_per_unit`` seconds of a fixed cost model, 1 s by default), so
reports and plots of such runs count iterations, never fake seconds. The
event log itself stays in seconds (docs/metrics.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from iterserve.records.time_units import MS_PER_S


@dataclass(frozen=True, slots=True)
class TimeUnit:
    name: str  # "s" or "iteration"
    seconds_per_unit: float = 1.0

    def __post_init__(self) -> None:
        if self.name not in ("s", "iteration"):
            raise ValueError(f"TimeUnit.name must be 's' or 'iteration', got {self.name!r}")
        if not (math.isfinite(self.seconds_per_unit) and self.seconds_per_unit > 0):
            raise ValueError("TimeUnit.seconds_per_unit must be > 0")

    @property
    def is_iterations(self) -> bool:
        return self.name == "iteration"

    def from_s(self, time_s: float) -> float:
        return time_s / self.seconds_per_unit

    @property
    def latency_name(self) -> str:
        """Unit of latency figures: milliseconds, or iterations."""
        return "iterations" if self.is_iterations else "ms"

    @property
    def latency_scale(self) -> float:
        """Multiply seconds by this for latency figures."""
        return 1.0 / self.seconds_per_unit if self.is_iterations else MS_PER_S

    @property
    def rate_suffix(self) -> str:
        return "per_iteration" if self.is_iterations else "per_s"

    def axis_label(self, what: str = "time") -> str:
        return f"{what} (iterations)" if self.is_iterations else f"{what} (s)"


SECONDS = TimeUnit("s")


def clock_time_unit(clock: str, seconds_per_clock_unit: float) -> TimeUnit:
    return TimeUnit("iteration", seconds_per_clock_unit) if clock == "iteration" else SECONDS
