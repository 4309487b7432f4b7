"""One bar chart per comparable group: each ranked metric with a value
for every run in the group, one panel per metric, each bar labelled with
its value. Drawn on an explicit Agg canvas (no pyplot state)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from iterserve.lab.compare import Comparison, Ranking
from iterserve.lab.compare_md import _metric_name


def plot_comparison(comparison: Comparison, out_dir: Path) -> list[Path]:
    paths = []
    for number, (group, rankings) in enumerate(
            zip(comparison.groups, comparison.rankings, strict=True), start=1):
        panels = [r for r in rankings if len(r.order) == len(group) > 1 and _is_headline(r)]
        if not panels:
            continue
        path = out_dir / f"compare_group{number}.png"
        _plot_group(group, panels, path)
        paths.append(path)
    return paths


def _is_headline(ranking: Ranking) -> bool:
    metric, _, _, percentile = ranking.metric
    return percentile in (None, "p50", "p99") and metric not in ("queue", "tpot")


def _plot_group(group: tuple[str, ...], panels: list[Ranking], path: Path) -> None:
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    figure = Figure(figsize=(4.5 * columns, 3.2 * rows), dpi=90, layout="tight")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, columns, squeeze=False)
    for ax, ranking in zip(axes.flat, panels, strict=False):
        values = dict(ranking.order)
        bars = ax.bar(range(len(group)), [values[label] for label in group])
        ax.bar_label(bars, fmt="%.4g", fontsize=7)
        ax.margins(y=0.15)  # room for the labels above the tallest bar
        ax.set_xticks(range(len(group)), group, rotation=20, ha="right", fontsize=7)
        ax.set_title(_metric_name(ranking.metric), fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    figure.savefig(path, format="png")
