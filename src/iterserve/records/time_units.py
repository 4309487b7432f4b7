"""The one home of time-unit conversion: records, reports and flags speak
milliseconds, clocks and cost models seconds."""

from __future__ import annotations

MS_PER_S = 1000.0


def ms_to_s(ms: float) -> float:
    return ms / MS_PER_S


def s_to_ms(seconds: float) -> float:
    return seconds * MS_PER_S
