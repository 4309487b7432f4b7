"""PNG plots of reports and run series.

Figures are built with ``matplotlib.figure.Figure`` on an explicit Agg canvas:
no pyplot, no global backend switch, no state shared between calls. Each
function writes one PNG and returns its path. Capacity use, wherever shown,
is labelled "not measured GPU utilization" (0x02); token rows against the
token budget are "token-budget utilisation", never slot occupancy. Runs on
the iteration clock pass ``unit`` so that axes count iterations.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress, cycle, pairwise
from pathlib import Path
from typing import Any, Literal

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from iterserve.metrics.capacity import (
    TOKEN_BUDGET_UTILISATION_LABEL,
    IterationComposition,
    batched_tokens_utilisation,
)
from iterserve.metrics.columns import RecordColumns
from iterserve.metrics.counted_sample import CountedSample
from iterserve.metrics.event_scan import scan_event_list
from iterserve.metrics.events import Event
from iterserve.metrics.report import LatencySamples, Report
from iterserve.metrics.series import ResourceSample, ServiceWeights
from iterserve.metrics.service_scan import client_service_curves, last_per_x
from iterserve.metrics.slo import ObservationWindow
from iterserve.metrics.time_unit import SECONDS, TimeUnit
from iterserve.metrics.timeline import RequestTimeline
from iterserve.records.time_units import MS_PER_S, ms_to_s

_DPI = 110
MAX_BAR_ARTISTS = 2000  # iterations drawn as a bar each; beyond, as a line each
MAX_STEP_VERTICES = 100_000  # step curves drawn point by point; beyond, one per distinct x
#: Per-iteration series of more points than this are drawn from time bins of
#: a quarter pixel (:func:`_time_bins`); fewer are drawn point by point.
MAX_SERIES_POINTS = 20_000
_BINS_PER_PIXEL = 4


def plot_latency_cdfs(reports: Sequence[Report], path: str | Path) -> Path:
    """Empirical CDFs of TTFT and TBT, one curve per report label, with the
    declared limits as dotted lines."""
    figure, axes = _figure(1, 2, width_in=11.0)
    for axis, name, limit_ms in (
        (axes[0], "ttft", reports[0].slo.ttft_ms if reports else None),
        (axes[1], "tbt", reports[0].slo.tbt_ms if reports else None),
    ):
        for report in reports:
            samples = report.samples.named()[name]
            _step_cdf(axis, samples, f"{report.label} (n={len(samples)})", scale=MS_PER_S)
        if limit_ms is not None:
            axis.axvline(limit_ms, color="black", linestyle=":", label=f"limit {limit_ms:g} ms")
        axis.set_xlabel(f"{name.upper()} (ms)")
        axis.set_ylabel("fraction of samples <= x")
        axis.set_ylim(0.0, 1.02)
        axis.set_title(f"{name.upper()} CDF")
        axis.legend(fontsize="small")
    return _save(figure, path)


_LATENCY_PANELS = (("ttft", "TTFT"), ("tbt", "TBT"), ("end_to_end", "end-to-end"),
                   ("queue", "queue time"))


def plot_latency_distributions(
    samples: LatencySamples,
    path: str | Path,
    *,
    label: str,
    unit: TimeUnit = SECONDS,
    ttft_limit_ms: float | None = None,
    tbt_limit_ms: float | None = None,
) -> Path:
    """Empirical CDFs of TTFT, TBT, end-to-end and queue time (ms, or
    iterations on the iteration clock), with declared limits dotted."""
    figure, axes = _figure(2, 2, width_in=11.0, height_in=8.0)
    limits = {"ttft": ttft_limit_ms, "tbt": tbt_limit_ms}
    for axis, (name, title) in zip(axes, _LATENCY_PANELS, strict=True):
        values = samples.named()[name]
        _step_cdf(axis, values, f"{label} (n={len(values)})", scale=unit.latency_scale)
        limit_ms = limits.get(name)
        if limit_ms is not None:
            shown = ms_to_s(limit_ms) * unit.latency_scale
            axis.axvline(shown, color="black", linestyle=":",
                         label=f"limit {limit_ms:g} ms")
        axis.set_xlabel(f"{title} ({unit.latency_name})")
        axis.set_ylabel("fraction of samples <= x")
        axis.set_ylim(0.0, 1.02)
        axis.set_title(f"{title} CDF")
        axis.legend(fontsize="small", loc="lower right")  # "best" is slow on large samples
    return _save(figure, path)


def plot_batch_composition(
    iterations: Sequence[IterationComposition],
    path: str | Path,
    *,
    max_rows_per_iteration: int | None = None,
    unit: TimeUnit = SECONDS,
) -> Path:
    """Stacked rows per iteration: prefill, decode, rebuild;
    ``max_rows_per_iteration`` is the token budget. A run with more
    iterations than bars fit (``MAX_BAR_ARTISTS``) gets a second panel
    below: the mean rows per iteration of each kind over time bins, stacked,
    where the per-iteration lines overdraw each other and hide the shares."""
    times_s = _column(iterations, "time_s") / unit.seconds_per_unit
    dense = len(times_s) > MAX_BAR_ARTISTS
    figure, axes = _figure(2 if dense else 1, 1, width_in=10.0, height_in=7.5 if dense else 4.5,
                           sharex=True)
    axis = axes[0]
    rows = [_column(iterations, name)
            for name in ("num_prefill_rows", "num_decode_rows", "num_rebuild_rows")]
    if len(times_s) > MAX_SERIES_POINTS:
        _composition_envelope(axis, rows, times_s, _num_bins(10.0))
    elif dense:
        _composition_lines(axis, rows, times_s)
    else:
        _composition_bars(axis, [kind.tolist() for kind in rows], times_s.tolist())
    title = "Batch composition per iteration"
    tallest = max(int((rows[0] + rows[1] + rows[2]).max(initial=0)),
                  max_rows_per_iteration or 0, 1)
    if max_rows_per_iteration is not None:
        fraction = batched_tokens_utilisation(iterations, max_rows_per_iteration).fraction
        if fraction is not None:
            title += f"\n{TOKEN_BUDGET_UTILISATION_LABEL}: {100 * fraction:.1f}%"
    axis.set_title(title)
    if dense:
        num_bins = _composition_means(axes[1], rows, times_s, MEAN_BINS)
        axes[1].set_title(f"Mean rows per iteration in {num_bins} time bins "
                          f"(about {len(times_s) / num_bins:,.0f} iterations each)")
    for panel in axes:
        panel.set_ylim(0.0, 1.2 * tallest)
        if max_rows_per_iteration is not None:
            panel.axhline(max_rows_per_iteration, color="black", linestyle=":",
                          label="token budget")
        panel.set_ylabel("rows")
        panel.legend(fontsize="small", loc="upper center", ncols=4)  # above the budget line
    axes[-1].set_xlabel(unit.axis_label("iteration start"))
    return _save(figure, path)


#: the time bins of the batch composition's mean panel (a long run's)
MEAN_BINS = 200


def _composition_means(axis: Axes, rows_by_kind: Sequence[np.ndarray], times: np.ndarray,
                       num_bins: int) -> int:
    """Each kind's mean rows per iteration over ``num_bins`` equal time
    bins, stacked (the iterations of a bin weigh alike); bins without an
    iteration are left out. Returns the number of bins drawn."""
    bins = _time_bins(times, num_bins)
    counts = np.bincount(bins, minlength=num_bins)
    drawn = counts > 0
    span = float(times[-1] - times[0]) or 1.0
    centers = times[0] + (np.arange(num_bins) + 0.5) * (span / num_bins)
    means = [np.bincount(bins, weights=rows.astype(np.float64), minlength=num_bins)[drawn]
             / counts[drawn] for rows in rows_by_kind]
    axis.stackplot(centers[drawn], *means, labels=[label for label, _ in _COMPOSITION],
                   colors=[color for _, color in _COMPOSITION], step="mid")
    return int(drawn.sum())


_COMPOSITION = (("prefill rows", "tab:blue"), ("decode rows", "tab:orange"),
                ("rebuild rows", "tab:red"))


def _column(records: Sequence[Any], name: str) -> np.ndarray:
    """Field ``name`` of every record as an array (a :class:`RecordColumns`'
    own array, without making the records)."""
    if isinstance(records, RecordColumns):
        return np.asarray(records.column(name))
    return np.asarray([getattr(record, name) for record in records])


def _composition_bars(axis: Axes, rows_by_kind: Sequence[list[int]],
                      times_s: list[float]) -> None:
    """One stacked bar per iteration (a patch each)."""
    width_s = _bar_width_s(times_s)
    bottom = [0] * len(times_s)
    for (label, color), rows in zip(_COMPOSITION, rows_by_kind, strict=True):
        axis.bar(times_s, rows, width_s, bottom=None if label == "prefill rows" else bottom,
                 align="edge", label=label, color=color)
        bottom = [b + r for b, r in zip(bottom, rows, strict=True)]


def _composition_lines(axis: Axes, rows_by_kind: Sequence[np.ndarray],
                       times: np.ndarray) -> None:
    """The same stacked bars as one line collection per kind, a thin
    vertical line per iteration with rows of that kind: a long run has more
    iterations than the axis has pixels (its bars are a pixel wide each), and
    a patch per bar costs kilobytes."""
    bottom = np.zeros(len(times))
    for (label, color), rows in zip(_COMPOSITION, rows_by_kind, strict=True):
        top = bottom + rows.astype(np.float64)
        drawn = top > bottom
        axis.vlines(times[drawn], bottom[drawn], top[drawn], colors=color, linewidth=0.8,
                    label=label)
        bottom = top


def _composition_envelope(axis: Axes, rows_by_kind: Sequence[np.ndarray], times: np.ndarray,
                          num_bins: int) -> None:
    """:func:`_composition_lines` of a run with more iterations than
    ``MAX_SERIES_POINTS``, drawn per time bin (a quarter pixel): per kind,
    the union of that kind's per-iteration lines in the bin, as disjoint
    lines midway between the bin's first and last such iteration. A pixel
    column shows what it showed with a line per iteration (the union, kinds
    drawn in the same order; anti-aliased edges aside: 0.8 % of the pixels
    differ by more than 0.1 at 220,000 iterations), for a few thousand
    segments instead of one per iteration and kind."""
    bins = _time_bins(times, num_bins)
    bottom = np.zeros(len(times))
    for (label, color), rows in zip(_COMPOSITION, rows_by_kind, strict=True):
        top = bottom + rows.astype(np.float64)
        drawn = np.flatnonzero(top > bottom)
        if len(drawn):
            first, last, low, high = _segment_unions(bins[drawn], bottom[drawn], top[drawn])
            drawn_s = times[drawn]
            axis.vlines((drawn_s[first] + drawn_s[last]) / 2, low, high, colors=color,
                        linewidth=0.8, label=label)
        bottom = top


def _segment_unions(bins: np.ndarray, low: np.ndarray, high: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The union of the segments ``[low, high]`` of each bin (``bins``
    ascending, values >= 0) as disjoint segments: for each, the indices of
    the bin's first and last segment, its low and its high end."""
    offset = float(high.max()) + 1.0  # each bin's values shifted past the previous bin's
    shifted_low, shifted_high = low + bins * offset, high + bins * offset
    order = np.lexsort((shifted_low, bins))
    shifted_low, shifted_high = shifted_low[order], shifted_high[order]
    reach = np.maximum.accumulate(shifted_high)  # the highest end so far (within the bin)
    starts = np.flatnonzero(np.concatenate(([True], shifted_low[1:] > reach[:-1])))
    union_high = np.maximum.reduceat(shifted_high, starts)
    union_bins = bins[order][starts]
    first = np.searchsorted(bins, union_bins)  # bins ascending: each bin's first segment
    last = np.searchsorted(bins, union_bins, side="right") - 1
    return (first, last, shifted_low[starts] - union_bins * offset,
            union_high - union_bins * offset)


def _num_bins(width_in: float) -> int:
    return int(width_in * _DPI * _BINS_PER_PIXEL)


def _time_bins(times: np.ndarray, num_bins: int) -> np.ndarray:
    """The bin (of ``num_bins`` equal time bins) of each of ``times``
    (ascending): ascending ints."""
    span = float(times[-1] - times[0]) or 1.0
    return np.minimum(((times - times[0]) * (num_bins / span)).astype(np.int64), num_bins - 1)


def _m4_indices(times: np.ndarray, series: Sequence[np.ndarray], num_bins: int) -> np.ndarray:
    """The points of ``series`` (over ascending ``times``) a line drawn
    ``num_bins`` bins wide needs: per bin, its first and last point and each
    series' lowest and highest (M4 aggregation, Jugel et al., VLDB 2014),
    ascending; all of them when there are at most ``MAX_SERIES_POINTS``."""
    count = len(times)
    if count <= MAX_SERIES_POINTS:
        return np.arange(count)
    bins = _time_bins(times, num_bins)
    starts = np.flatnonzero(np.concatenate(([True], bins[1:] != bins[:-1])))
    ends = np.append(starts[1:], count) - 1
    kept = [starts, ends]
    lengths = np.diff(np.append(starts, count))
    bin_of = np.repeat(np.arange(len(starts)), lengths)
    for values in series:
        finite = np.where(np.isnan(values), -np.inf, values)
        order = np.lexsort((finite, bin_of))  # by bin, then value: each bin's min first
        kept += [order[starts], order[ends]]
    return np.unique(np.concatenate(kept))


def clear_upper_corner(times: np.ndarray, *series: np.ndarray
                       ) -> Literal["upper left", "upper right"]:
    """The upper corner a legend covers least: ``"upper left"`` when the
    tallest point of ``series`` lies in the later half of ``times`` (a queue
    that grows over an overloaded run), else ``"upper right"`` (a burst
    early on). A linear scan: matplotlib's ``"best"`` is slow on long runs."""
    if not len(times) or not series:
        return "upper right"
    tallest = np.nanmax(np.vstack(series), axis=0, initial=-np.inf)
    peak_s = times[int(np.argmax(tallest))]
    return "upper left" if peak_s > (times[0] + times[-1]) / 2 else "upper right"


def plot_queue_and_kv(
    samples: Sequence[ResourceSample], path: str | Path, *, unit: TimeUnit = SECONDS
) -> Path:
    """Queue depth (waiting, suspended after preemption, running) and KV
    block usage over time."""
    figure, axes = _figure(2, 1, width_in=10.0, height_in=6.5, sharex=True)
    times = _column(samples, "time_s") / unit.seconds_per_unit
    waiting_all, suspended = (_column(samples, name).astype(np.float64)
                              for name in ("num_waiting", "num_suspended"))
    waiting = waiting_all - suspended
    running = _column(samples, "num_running").astype(np.float64)
    used, total = (_column(samples, name) for name in ("num_kv_blocks_used", "num_kv_blocks_total"))
    # no blocks: unbounded (ResourceSample.kv_usage_fraction None), drawn as NaN
    usage = np.where(total == 0, np.nan, used / np.where(total == 0, 1, total))
    # a long run's series: the points a line a quarter pixel wide needs
    keep = _m4_indices(times, (waiting, suspended, running, usage), _num_bins(10.0))
    times_s = times[keep]
    axes[0].step(times_s, waiting[keep], where="post", label="waiting (not yet admitted)")
    axes[0].step(times_s, suspended[keep], where="post", label="suspended (preempted)")
    axes[0].step(times_s, running[keep], where="post", label="running")
    axes[0].set_ylabel("requests")
    axes[0].set_title("Queue depth")
    axes[0].legend(fontsize="small", loc=clear_upper_corner(times, waiting, suspended, running))
    axes[1].step(times_s, usage[keep], where="post", color="tab:green")
    axes[1].set_ylim(0.0, 1.02)
    axes[1].set_ylabel("KV blocks used / total")
    axes[1].set_xlabel(unit.axis_label())
    axes[1].set_title("KV block usage")
    return _save(figure, path)


def plot_client_service(
    events: Iterable[Event],
    path: str | Path,
    *,
    weights: ServiceWeights | None = None,
    window: ObservationWindow | None = None,
    unit: TimeUnit = SECONDS,
) -> Path:
    """Cumulative weighted completed service per client (0x09A F53)."""
    end_s = math.inf if window is None else window.end_s
    timelines = scan_event_list(events, end_s=end_s).timelines.values()
    return plot_timelines_service(timelines, path, weights=weights, window=window, unit=unit)


def plot_timelines_service(
    timelines: Iterable[RequestTimeline],
    path: str | Path,
    *,
    weights: ServiceWeights | None = None,
    window: ObservationWindow | None = None,
    unit: TimeUnit = SECONDS,
) -> Path:
    """:func:`plot_client_service` from timelines already built with facts
    before the window's end."""
    service_weights = weights or ServiceWeights()
    start_s = -math.inf if window is None else window.start_s
    # a time slice of the per-token facts at a time (bounded memory), merged as _last_per_x merges
    series = client_service_curves(timelines, service_weights, start_s=start_s,
                                   max_points=MAX_STEP_VERTICES)
    figure, axes = _figure(1, 1, width_in=10.0)
    origin_s = 0.0 if window is None else window.start_s
    for client, (times_s, cumulative) in series.items():
        axes[0].step(
            np.concatenate([[unit.from_s(origin_s)], times_s / unit.seconds_per_unit]),
            np.concatenate([[0.0], cumulative]),
            where="post",
            label=client,
        )
    axes[0].set_title(
        "Completed service per client "
        f"(w_p={service_weights.prompt_weight:g}, w_q={service_weights.output_weight:g})"
    )
    axes[0].set_xlabel(unit.axis_label())
    axes[0].set_ylabel("cumulative weighted service")
    axes[0].legend(fontsize="small", title="client", loc="upper left")
    return _save(figure, path)


def plot_attainment_vs_rate(sweeps: Mapping[str, Sequence[Report]], path: str | Path) -> Path:
    """Offered-load attainment (solid) against offered rate for each policy;
    completion-conditioned attainment dashed and labelled diagnostic."""
    figure, axes = _figure(1, 1, width_in=9.0, height_in=5.5)
    axis = axes[0]
    for label, reports in sweeps.items():
        ordered = sorted(reports, key=lambda report: report.rates.offered_rate_per_s)
        rates = [report.rates.offered_rate_per_s for report in ordered]
        offered = [_nan_if_none(report.attainment.offered_load) for report in ordered]
        conditioned = [_nan_if_none(report.attainment.completion_conditioned) for report in ordered]
        (line,) = axis.plot(rates, offered, marker="o", label=f"{label}: offered-load attainment")
        axis.plot(
            rates,
            conditioned,
            linestyle="--",
            marker="x",
            color=line.get_color(),
            label=f"{label}: completion-conditioned (diagnostic)",
        )
    axis.set_ylim(0.0, 1.05)
    axis.set_xlabel("offered rate (req/s)")
    axis.set_ylabel("SLO attainment")
    axis.set_title("SLO attainment vs offered rate")
    figure.legend(loc="outside lower center", fontsize="small", ncols=2)
    return _save(figure, path)


def plot_sweep(policies: Mapping[str, Mapping[str, Any]], alpha: float, path: str | Path) -> Path:
    """Mean offered-load attainment per nominal rate (solid, min-max band over
    trials); completion-conditioned mean dashed, labelled diagnostic. Each
    policy has its own marker, each smaller than the one before (policies
    that attain alike still show, one inside the other); a rate whose
    observed offered rate fell well below the nominal one
    (``offered_rate_sustained`` false: not counted as capacity) is hollow."""
    figure, (axis,) = _figure(1, 1, width_in=9.0, height_in=5.5)
    any_unsustained = False
    for index, ((name, summary), marker) in enumerate(
            zip(policies.items(), cycle(_SWEEP_MARKERS), strict=False)):
        size = max(10.0 - 2.0 * index, 4.0)  # each drawn inside the one before, where they meet
        any_unsustained |= _sweep_policy(axis, name, summary, marker, size)
    axis.axhline(alpha, color="black", linestyle=":", label=f"alpha = {alpha:g}")
    if any_unsustained:
        axis.plot([], [], linestyle="none", marker="o", markerfacecolor="white", color="gray",
                  label="hollow: observed offered rate well below nominal "
                        "(not counted as capacity)")
    axis.set_ylim(0.0, 1.05)
    axis.set_xlabel("offered rate (requests/s, nominal Poisson rate)")
    axis.set_ylabel("SLO attainment (mean over trials)")
    axis.set_title("SLO attainment vs offered rate; dotted verticals: goodput capacity")
    axis.legend(fontsize="small", loc="lower left")
    return _save(figure, path)


def _sweep_policy(axis: Axes, name: str, summary: Mapping[str, Any], marker: str,
                  size: float) -> bool:
    """One policy's lines of :func:`plot_sweep`; whether any of its rates
    was not sustained (drawn hollow)."""
    entries = summary["rates"]
    rates = [entry["rate_per_s"] for entry in entries]
    means = [entry["mean_offered_load_attainment"] for entry in entries]
    (line,) = axis.plot(rates, means, marker=marker, markersize=size,
                        label=f"{name}: offered-load attainment")
    unsustained = [not entry.get("offered_rate_sustained", True) for entry in entries]
    if any(unsustained):
        axis.plot(list(compress(rates, unsustained)), list(compress(means, unsustained)),
                  linestyle="none", marker=marker, markersize=size, markerfacecolor="white",
                  color=line.get_color())
    axis.fill_between(rates, [min(e["offered_load_attainment"]) for e in entries],
                      [max(e["offered_load_attainment"]) for e in entries],
                      color=line.get_color(), alpha=0.15)
    conditioned = [entry["completion_conditioned_mean"] for entry in entries]
    axis.plot(rates, [float("nan") if c is None else c for c in conditioned], linestyle="--",
              color=line.get_color(), label=f"{name}: completion-conditioned (diagnostic)")
    if summary["capacity_rate_per_s"] is not None:
        axis.axvline(summary["capacity_rate_per_s"], color=line.get_color(), linestyle=":")
    return any(unsustained)


_SWEEP_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _figure(
    rows: int, cols: int, *, width_in: float, height_in: float = 4.5, sharex: bool = False
) -> tuple[Figure, list[Axes]]:
    # a figure's artists hold reference cycles: collect the previous plot's
    # now, so a report's plots take turns in memory instead of adding up
    gc.collect()
    figure = Figure(figsize=(width_in, height_in), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.subplots(rows, cols, sharex=sharex, squeeze=False)
    return figure, [axis for row in grid for axis in row]


def _save(figure: Figure, path: str | Path) -> Path:
    target = Path(path)
    figure.savefig(target, format="png")
    return target


def _step_cdf(axis: Axes, samples: Sequence[float] | np.ndarray | CountedSample, label: str,
              scale: float = 1.0) -> None:
    """The CDF of ``samples * scale`` as float64 arrays (a run's TBT samples
    are one per token); the same values as Python floats: k / n and the
    products are correctly rounded."""
    if isinstance(samples, CountedSample) and len(samples) > MAX_STEP_VERTICES:
        first, x, y = _counted_cdf(samples, scale)
        axis.step(np.concatenate([first, x]), np.concatenate([[0.0], y]), where="post",
                  label=label)
        return
    values = np.asarray(samples, dtype=np.float64)
    if len(values) > MAX_STEP_VERTICES and _is_ascending(values):
        first, x, y = _merged_cdf(values, scale)  # a chunk of products at a time
    else:
        ordered = _ascending(values * scale)
        if not len(ordered):
            axis.plot([], [], label=f"{label}: no samples")
            return
        first = ordered[:1]
        if len(ordered) <= MAX_STEP_VERTICES:
            x, y = ordered, np.arange(1, len(ordered) + 1, dtype=np.float64) / len(ordered)
        else:  # :func:`_last_per_x` without the n-point fraction array: y only where kept
            kept = np.flatnonzero(np.append(ordered[1:] != ordered[:-1], True))
            x, y = ordered[kept], (kept + 1).astype(np.float64) / len(ordered)
    axis.step(np.concatenate([first, x]), np.concatenate([[0.0], y]), where="post", label=label)


_CDF_CHUNK = 1 << 20  # samples scaled at a time by :func:`_merged_cdf` (8 MiB)


def _merged_cdf(ascending: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The merged CDF of ``ascending * scale`` (non-empty): its first value,
    the last index of each run of equal products (the values there) and
    (index + 1) / n, computed a chunk of products at a time; a positive scale
    keeps the order, so the products ascend as the samples do."""
    n = len(ascending)
    xs, ys = [], []
    for at in range(0, n, _CDF_CHUNK):
        part = ascending[at:at + _CDF_CHUNK + 1] * scale  # one past the chunk: its next value
        ends = part[1:] != part[:-1] if at + _CDF_CHUNK < n else np.append(
            part[1:] != part[:-1], True)
        kept = np.flatnonzero(ends)
        xs.append(part[kept])
        ys.append((kept + at + 1).astype(np.float64) / n)
    return ascending[:1] * scale, np.concatenate(xs), np.concatenate(ys)


def _counted_cdf(sample: CountedSample, scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_merged_cdf` of the array a counted sample stands for: a
    distinct product's last index is its cumulative count less one."""
    products = sample.values * scale  # ascending: a positive scale keeps the order
    ends = np.append(products[1:] != products[:-1], True)
    return products[:1], products[ends], np.cumsum(sample.counts)[ends].astype(np.float64) / len(
        sample)


def _is_ascending(values: np.ndarray) -> bool:
    """Whether ``values`` ascend, checked a chunk at a time (no n-point mask)."""
    return all(bool((part[:-1] <= part[1:]).all())
               for part in (values[at:at + _CDF_CHUNK + 1]
                            for at in range(0, len(values), _CDF_CHUNK)))


def _ascending(values: np.ndarray) -> np.ndarray:
    """``values`` sorted; as given when already ascending (a report's samples
    are: no sorted copy of a per-token sample)."""
    if len(values) < 2 or bool((values[:-1] <= values[1:]).all()):
        return values
    return np.sort(values)


def _last_per_x(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same post-step curve with one vertex per distinct ``x`` (sorted):
    a run of equal ``x`` draws a vertical edge only its last ``y`` ends, so
    keeping the last point of each run keeps the curve and drops the rest
    (a long run's samples and service facts repeat a few values). Curves of
    at most ``MAX_STEP_VERTICES`` points are drawn as given (the rasteriser's
    anti-aliasing differs by a few pixels when vertices are merged)."""
    if len(x) <= MAX_STEP_VERTICES:
        return x, y
    return last_per_x(x, y)


def _bar_width_s(times_s: Sequence[float]) -> float:
    gaps = [later - earlier for earlier, later in pairwise(times_s) if later > earlier]
    return 0.9 * min(gaps) if gaps else 1.0


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value
