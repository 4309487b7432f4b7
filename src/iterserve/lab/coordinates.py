"""Result coordinates and the Comparable predicate (0x0E, F66, F67).

A result is R = (V, C_s, Theta, H, W, B, M, L, Q, Y, E): source version and
location (provenance, never compared), model, hardware and threads,
workload and arrivals, baseline, metric with unit / denominator /
percentile, SLO target, load coordinate, the value Y and the evidence
class. Two results are comparable only when every coordinate of
:data:`COMPARISON_SET` is equal; a shared word such as "throughput" is not
enough.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

EVIDENCE_CLASSES = ("simulated", "measured here", "source-reported")

#: the coordinates every comparable pair must share (0x0E comparison set C)
COMPARISON_SET: tuple[str, ...] = (
    "model", "hardware", "threads", "workload", "arrivals", "baseline", "metric", "unit",
    "denominator", "percentile", "slo", "load", "evidence_class")


class CoordinateError(ValueError):
    """A result record lacks a coordinate or has one of the wrong form."""


@dataclass(frozen=True, slots=True)
class ResultRecord:
    """One value with every coordinate that gives it meaning. Text fields
    hold a canonical description; ``None`` means "not applicable" and is
    itself a coordinate value (two runs without an SLO share one)."""

    label: str  # who produced it (policy, system): what a comparison is about
    source_version: str
    source_location: str
    model: str
    hardware: str
    threads: int | None
    workload: str
    arrivals: str
    baseline: str
    metric: str
    unit: str
    denominator: str
    percentile: str | None
    slo: str | None
    load: str
    value: float | None  # None: withheld (a percentile below its sample gate)
    evidence_class: str
    higher_is_better: bool

    def __post_init__(self) -> None:
        if self.evidence_class not in EVIDENCE_CLASSES:
            raise CoordinateError(f"result {self.label!r}: evidence_class must be one of "
                                  f"{', '.join(EVIDENCE_CLASSES)}, got {self.evidence_class!r}")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: Any, where: str) -> ResultRecord:
        if not isinstance(obj, dict):
            raise CoordinateError(f"{where}: a result must be an object")
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [name for name in names if name not in obj]
        if missing:
            raise CoordinateError(f"{where}: result lacks coordinate {missing[0]!r}")
        unknown = sorted(set(obj) - set(names))
        if unknown:
            raise CoordinateError(f"{where}: unknown result field {unknown[0]!r}")
        return cls(**{name: obj[name] for name in names})


def metric_key(record: ResultRecord) -> tuple[str, str, str, str | None]:
    """What a value measures: metric, unit, denominator and percentile."""
    return (record.metric, record.unit, record.denominator, record.percentile)


def differing_coordinates(a: ResultRecord, b: ResultRecord) -> tuple[str, ...]:
    """The coordinates of the comparison set on which ``a`` and ``b`` differ."""
    return tuple(name for name in COMPARISON_SET if getattr(a, name) != getattr(b, name))


def is_comparable(a: ResultRecord, b: ResultRecord) -> bool:
    """F67: Comparable(r_a, r_b) = AND over c in C of c(r_a) = c(r_b)."""
    return not differing_coordinates(a, b)
