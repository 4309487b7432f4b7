"""The comparison as text: one table per comparable group, then every
refused pair with the coordinates that differ (0x0E)."""

from __future__ import annotations

from iterserve.lab.compare import Comparison, MetricKey, Ranking
from iterserve.lab.source_registry import RegistryFlags
from iterserve.records.failures import failure_of

INCOMPARABLE = failure_of("incomparable_pair")


def _metric_name(key: MetricKey) -> str:
    metric, unit, denominator, percentile = key
    head = metric if percentile is None else f"{metric} {percentile}"
    return f"{head} ({unit}; per {denominator})"


def _cell(value: float | None) -> str:
    return "withheld" if value is None else f"{value:.6g}"


def _group_table(labels: tuple[str, ...], rankings: tuple[Ranking, ...]) -> list[str]:
    lines = ["| metric | " + " | ".join(labels) + " | order (best first) |",
             "|---|" + "---|" * (len(labels) + 1)]
    for ranking in rankings:
        values = dict(ranking.order)
        cells = [_cell(values.get(label)) for label in labels]
        order = _order_text(ranking) if len(ranking.order) > 1 else (
            "not ranked (fewer than two values)")
        lines.append(f"| {_metric_name(ranking.metric)} | " + " | ".join(cells) + f" | {order} |")
    return lines


def _order_text(ranking: Ranking) -> str:
    """Best first; equal values are joined by ``=``, never ordered."""
    text = ranking.order[0][0]
    for (_, before), (label, value) in zip(ranking.order, ranking.order[1:], strict=False):
        text += f" {'=' if value == before else '>'} {label}"
    return text


def render_comparison(comparison: Comparison) -> str:
    lines = ["# Comparison (0x0E: comparable only when every coordinate is equal)", "",
             f"{len(comparison.runs)} runs, {len(comparison.verdicts)} pairs, "
             f"{comparison.num_comparable_pairs} comparable."]
    if comparison.num_comparable_pairs == 0:
        lines.append("No comparable pair: no ordering is produced.")
    for number, (group, rankings) in enumerate(
            zip(comparison.groups, comparison.rankings, strict=True), start=1):
        if len(group) < 2:
            continue
        lines += ["", f"## Comparable group {number}: {', '.join(group)}", ""]
        lines += _group_table(group, rankings)
    flagged = [run for run in comparison.runs if run.flags is not None]
    if flagged:
        lines += ["", "## Registry entries", "", "| run | coordinates complete | reproduced here |",
                  "|---|---|---|"]
        lines += [_flag_row(run.label, run.flags) for run in flagged if run.flags is not None]
    refused = [v for v in comparison.verdicts if not v.is_comparable]
    if refused:
        lines += ["", f"## Refused pairs (not ranked: {INCOMPARABLE.label})", ""]
        lines += [f"- {v.a} vs {v.b}: differ in {', '.join(v.differing)}" for v in refused]
    return "\n".join(lines) + "\n"


def _flag_row(label: str, flags: RegistryFlags) -> str:
    reproduced = f"yes ({flags.reproduction})" if flags.reproduced_locally else "no"
    return f"| {label} | {'yes' if flags.coordinates_complete else 'no'} | {reproduced} |"
