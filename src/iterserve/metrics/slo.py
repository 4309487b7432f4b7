"""Declared latency objectives and the observation window (0x07).

Both are small frozen configs validated on construction. Limits are declared
in milliseconds (the unit SLOs are written in); the ``*_s`` properties give the
same limits on the event clock, which is in seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from iterserve.records.time_units import MS_PER_S


@dataclass(frozen=True, slots=True)
class SloConfig:
    """Request-level SLO: a completed request is SLO-valid when every declared
    clock meets its limit (0x07). ``None`` means the clock is not part of the
    contract. At least one limit must be declared.

    - ``ttft_ms``: first output - ORIGINAL arrival <= limit (F30).
    - ``tbt_ms``: every gap between consecutive outputs <= limit (F31).
    - ``tpot_ms``: (last - first) / (n_out - 1) <= limit; a one-output request
      has no TPOT and is not judged on it.
    - ``clock_tolerance_ms``: comparisons allow this much float rounding
      (a virtual clock that adds 0.1 and 0.2 lands at 0.30000000000000004).
    """

    ttft_ms: float | None = None
    tbt_ms: float | None = None
    tpot_ms: float | None = None
    clock_tolerance_ms: float = 1e-6

    def __post_init__(self) -> None:
        limits = {"ttft_ms": self.ttft_ms, "tbt_ms": self.tbt_ms, "tpot_ms": self.tpot_ms}
        if all(value is None for value in limits.values()):
            raise ValueError("SloConfig needs at least one of ttft_ms, tbt_ms, tpot_ms")
        for name, value in limits.items():
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"SloConfig.{name} must be a finite number > 0, got {value!r}")
        if not (math.isfinite(self.clock_tolerance_ms) and self.clock_tolerance_ms >= 0):
            raise ValueError("SloConfig.clock_tolerance_ms must be finite and >= 0")

    @property
    def ttft_s(self) -> float | None:
        return None if self.ttft_ms is None else self.ttft_ms / MS_PER_S

    @property
    def tbt_s(self) -> float | None:
        return None if self.tbt_ms is None else self.tbt_ms / MS_PER_S

    @property
    def tpot_s(self) -> float | None:
        return None if self.tpot_ms is None else self.tpot_ms / MS_PER_S

    @property
    def clock_tolerance_s(self) -> float:
        return self.clock_tolerance_ms / MS_PER_S

    def meets(self, observed_s: float, limit_s: float) -> bool:
        """Whether an observed clock meets a limit, within the declared tolerance."""
        return observed_s <= limit_s + self.clock_tolerance_s

    def to_dict(self) -> dict[str, float | None]:
        return {
            "ttft_ms": self.ttft_ms,
            "tbt_ms": self.tbt_ms,
            "tpot_ms": self.tpot_ms,
            "clock_tolerance_ms": self.clock_tolerance_ms,
        }


@dataclass(frozen=True, slots=True)
class ObservationWindow:
    """Half-open window [start_s, end_s) on the run's clock (0x07, W).

    The offered cohort is every request whose ORIGINAL arrival lies in the
    window. Facts stamped at or after ``end_s`` are not observed: a request
    finishing exactly at ``end_s`` is unfinished at window end.
    """

    start_s: float
    end_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start_s) and math.isfinite(self.end_s)):
            raise ValueError("ObservationWindow bounds must be finite")
        if self.end_s <= self.start_s:
            raise ValueError(
                f"ObservationWindow needs end_s > start_s, got [{self.start_s}, {self.end_s})"
            )

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def contains(self, time_s: float) -> bool:
        return self.start_s <= time_s < self.end_s

    def to_dict(self) -> dict[str, float]:
        return {"start_s": self.start_s, "end_s": self.end_s, "duration_s": self.duration_s}
