"""Compare runs only where 0x0E allows it (F67).

Runs are labelled groups of :class:`ResultRecord` values. Two runs are
comparable when, for every metric they share, every coordinate of the
comparison set is equal (and they share at least one metric); equality
of coordinates makes comparability an equivalence, so runs fall into
groups. Inside a group each metric is ranked; across groups every pair
is refused with the coordinates that differ, and nothing is ranked.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from iterserve.lab.coordinates import ResultRecord, differing_coordinates, metric_key
from iterserve.lab.source_registry import RegistryFlags

MetricKey = tuple[str, str, str, str | None]


class CompareError(ValueError):
    """The runs given cannot be told apart (two share a label)."""


@dataclass(frozen=True, slots=True)
class Run:
    label: str
    records: tuple[ResultRecord, ...]
    flags: RegistryFlags | None = None  # a registry entry's completeness / reproduction

    def by_metric(self) -> dict[MetricKey, ResultRecord]:
        return {metric_key(r): r for r in self.records}


@dataclass(frozen=True, slots=True)
class PairVerdict:
    a: str
    b: str
    differing: tuple[str, ...]  # empty: comparable

    @property
    def is_comparable(self) -> bool:
        return not self.differing


@dataclass(frozen=True, slots=True)
class Ranking:
    """One metric's order inside a comparable group, best first; runs whose
    value is withheld are named, never ranked."""

    metric: MetricKey
    order: tuple[tuple[str, float], ...]
    withheld: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Comparison:
    runs: tuple[Run, ...]
    verdicts: tuple[PairVerdict, ...]
    groups: tuple[tuple[str, ...], ...]  # labels; singletons included
    rankings: tuple[tuple[Ranking, ...], ...]  # per group; empty for a singleton

    @property
    def num_comparable_pairs(self) -> int:
        return sum(v.is_comparable for v in self.verdicts)


def pair_verdict(a: Run, b: Run) -> PairVerdict:
    """The coordinates on which ``a`` and ``b`` differ over their shared
    metrics; without a shared metric, every coordinate on which their first
    values differ (metric, unit, denominator or percentile among them)."""
    left, right = a.by_metric(), b.by_metric()
    shared = [key for key in left if key in right]
    if not a.records or not b.records:
        return PairVerdict(a.label, b.label, ("metric",))
    if not shared:
        return PairVerdict(a.label, b.label, differing_coordinates(a.records[0], b.records[0]))
    names: dict[str, None] = {}
    for key in shared:
        names.update(dict.fromkeys(differing_coordinates(left[key], right[key])))
    return PairVerdict(a.label, b.label, tuple(names))


def compare_runs(runs: Sequence[Run]) -> Comparison:
    labels = [run.label for run in runs]
    if len(set(labels)) != len(labels):
        duplicate = next(label for label in labels if labels.count(label) > 1)
        raise CompareError(f"two runs share the label {duplicate!r}")
    verdicts = tuple(pair_verdict(a, b) for a, b in itertools.combinations(runs, 2))
    groups = _groups(labels, verdicts)
    by_label = {run.label: run for run in runs}
    rankings = tuple(_rank_group([by_label[label] for label in group]) if len(group) > 1
                     else () for group in groups)
    return Comparison(tuple(runs), verdicts, groups, rankings)


def _groups(labels: list[str], verdicts: Sequence[PairVerdict]) -> tuple[tuple[str, ...], ...]:
    comparable = {(v.a, v.b) for v in verdicts if v.is_comparable}
    groups: list[list[str]] = []
    for label in labels:
        home = next((g for g in groups if (g[0], label) in comparable), None)
        if home is None:
            groups.append([label])
        else:
            home.append(label)
    return tuple(tuple(g) for g in groups)


def _rank_group(runs: Sequence[Run]) -> tuple[Ranking, ...]:
    tables = [run.by_metric() for run in runs]
    keys = [key for key in tables[0] if all(key in t for t in tables[1:])]
    rankings = []
    for key in keys:
        higher = tables[0][key].higher_is_better
        valued = [(run.label, float(value)) for run, t in zip(runs, tables, strict=True)
                  if (value := t[key].value) is not None]
        withheld = tuple(run.label for run, t in zip(runs, tables, strict=True)
                         if t[key].value is None)
        ordered = sorted(valued, key=lambda item: -item[1] if higher else item[1])
        rankings.append(Ranking(key, tuple(ordered), withheld))
    return tuple(rankings)
