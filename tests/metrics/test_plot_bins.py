"""A long run's per-iteration plots are drawn from quarter-pixel time bins
(issue 15: 220,000 iterations took 6.9 s and 2.1 s to draw): the same
picture, give or take a few pixels, from a few thousand segments."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iterserve.metrics import plots
from iterserve.metrics.capacity import IterationComposition
from iterserve.metrics.columns import RecordColumns
from iterserve.metrics.series import ResourceSample


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 30), st.integers(1, 10)),
                min_size=1, max_size=40))
def test_segment_unions_are_each_bin_s_union(segments) -> None:
    segments.sort(key=lambda segment: segment[0])  # bins ascending, as the plot's are
    bins = np.array([b for b, _, _ in segments])
    low = np.array([float(lo) for _, lo, _ in segments])
    high = low + np.array([float(width) for _, _, width in segments])
    first, last, union_low, union_high = plots._segment_unions(bins, low, high)
    got: dict[int, list[tuple[float, float]]] = {}
    for index, end, lo, hi in zip(first, last, union_low, union_high, strict=True):
        assert index == int(np.searchsorted(bins, bins[index]))  # the bin's first segment
        assert bins[end] == bins[index] and (end + 1 == len(bins) or bins[end + 1] > bins[end])
        got.setdefault(int(bins[index]), []).append((float(lo), float(hi)))
    want: dict[int, list[tuple[float, float]]] = {}
    for b in sorted(set(bins.tolist())):
        merged: list[list[float]] = []
        for lo, hi in sorted(zip(low[bins == b], high[bins == b], strict=True)):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        want[b] = [(lo, hi) for lo, hi in merged]
    assert got == want


def test_m4_keeps_each_bin_s_ends_and_extremes(monkeypatch) -> None:
    monkeypatch.setattr(plots, "MAX_SERIES_POINTS", 10)
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.uniform(0.5, 1.5, 500))
    series = (rng.integers(0, 100, 500).astype(float), rng.uniform(0, 1, 500))
    series[1][7] = np.nan
    kept = plots._m4_indices(times, series, 20)
    assert (np.diff(kept) > 0).all()
    bins = plots._time_bins(times, 20)
    for b in np.unique(bins):
        members = np.flatnonzero(bins == b)
        assert members[0] in kept and members[-1] in kept
        for values in series:
            finite = np.where(np.isnan(values[members]), -np.inf, values[members])
            assert members[np.argmin(finite)] in kept or finite.min() in finite[np.isin(
                members, kept)]
            assert finite.max() in finite[np.isin(members, kept)]
    monkeypatch.setattr(plots, "MAX_SERIES_POINTS", 1000)
    assert (plots._m4_indices(times, series, 20) == np.arange(500)).all()


def _run(num: int) -> tuple[RecordColumns[IterationComposition], RecordColumns[ResourceSample]]:
    rng = np.random.default_rng(0)
    iterations = RecordColumns(IterationComposition, "dqqqq")
    samples = RecordColumns(ResourceSample, "dqqqqq")
    time_s = 0.0
    for index in range(num):
        time_s += float(rng.uniform(0.015, 0.03))
        decode = int(rng.integers(60, 120))
        prefill = int(rng.integers(1, 1000)) if rng.integers(0, 3) == 0 else 0
        rebuild = 50 if rng.integers(0, 20) == 0 else 0
        iterations.append(IterationComposition(time_s, prefill, decode, rebuild,
                                               num_sequences=decode + 1))
        waiting = int(abs(np.sin(index / 500)) * 300)
        samples.append(ResourceSample(time_s, waiting + 3, decode, 3900 - waiting, 4000,
                                      num_suspended=3))
    return iterations, samples


def _differing(first: Path, second: Path, by: float) -> float:
    """The fraction of pixels whose colour differs by more than ``by`` in a channel."""
    a, b = matplotlib.image.imread(first), matplotlib.image.imread(second)
    assert a.shape == b.shape
    return float((np.abs(a - b).max(axis=2) > by).mean())


@pytest.mark.parametrize("plot", ["batch", "queue"])
def test_binned_plots_draw_the_per_iteration_picture(tmp_path, monkeypatch, plot) -> None:
    iterations, samples = _run(30_000)  # about 7 a bin

    def draw(path: Path) -> Path:
        if plot == "batch":
            return plots.plot_batch_composition(iterations, path, max_rows_per_iteration=2048)
        return plots.plot_queue_and_kv(samples, path)

    monkeypatch.setattr(plots, "MAX_SERIES_POINTS", 50_000)
    whole = draw(tmp_path / "whole.png")  # drawn point by point
    monkeypatch.setattr(plots, "MAX_SERIES_POINTS", 20_000)
    binned = draw(tmp_path / "binned.png")
    # anti-aliased edges: 2.0 % and 1.4 % of the batch plot's pixels here
    assert _differing(whole, binned, 0.1) < 0.025
    assert _differing(whole, binned, 0.3) < 0.018
    assert whole.read_bytes() != binned.read_bytes()  # the binned path ran


def test_record_columns_hand_out_a_field_s_array() -> None:
    iterations, _ = _run(5)
    assert list(iterations.column("num_decode_rows")) == [
        item.num_decode_rows for item in iterations]
    with pytest.raises(KeyError, match="no field 'rows'"):
        iterations.column("rows")


@pytest.mark.parametrize(("peak_at", "corner"), [(0.9, "upper left"), (0.5, "upper right"),
                                                  (0.1, "upper right")])
def test_the_queue_legend_sits_in_the_corner_away_from_the_peak(tmp_path, monkeypatch,
                                                                 peak_at, corner) -> None:
    """A queue that peaks late (an overloaded run's) gets its legend on the
    left, one that peaks early on the right: the legend the plot draws."""
    peak = int(peak_at * 99)
    samples = [ResourceSample(float(i), 500 - 4 * abs(i - peak), 10, 0, 0) for i in range(100)]
    corners: list[object] = []
    legend = plots.Axes.legend

    def spy(axis, *args, **kwargs):
        corners.append(kwargs.get("loc"))
        return legend(axis, *args, **kwargs)

    monkeypatch.setattr(plots.Axes, "legend", spy)
    plots.plot_queue_and_kv(samples, tmp_path / "queue.png")
    assert corners == [corner]
    assert plots.clear_upper_corner(np.array([]), np.array([])) == "upper right"
    assert plots.clear_upper_corner(np.arange(4.0), np.full(4, np.nan)) == "upper right"


def test_a_long_run_s_composition_shows_each_kind_s_mean_per_bin(tmp_path, monkeypatch) -> None:
    """Past MAX_BAR_ARTISTS iterations the per-iteration lines overdraw each
    other; the panel below stacks each kind's mean rows per iteration in
    time bins: weighted by the bins' iteration counts, the means give back
    every kind's total rows. A short run keeps one panel."""
    iterations, _ = _run(5_000)
    stacks: list[tuple[np.ndarray, list[np.ndarray]]] = []
    stackplot = plots.Axes.stackplot

    def spy(axis, x, *ys, **kwargs):
        stacks.append((np.asarray(x), [np.asarray(y) for y in ys]))
        return stackplot(axis, x, *ys, **kwargs)

    monkeypatch.setattr(plots.Axes, "stackplot", spy)
    plots.plot_batch_composition(iterations, tmp_path / "long.png", max_rows_per_iteration=2048)
    assert len(stacks) == 1
    centers, means = stacks[0]
    times = np.asarray(iterations.column("time_s"))
    bins = plots._time_bins(times, plots.MEAN_BINS)
    counts = np.bincount(bins, minlength=plots.MEAN_BINS)
    assert len(centers) == (counts > 0).sum() and (np.diff(centers) > 0).all()
    for mean, name in zip(means, ("num_prefill_rows", "num_decode_rows", "num_rebuild_rows"),
                          strict=True):
        column = np.asarray(iterations.column(name), dtype=np.float64)
        assert float((mean * counts[counts > 0]).sum()) == pytest.approx(column.sum())
    short, _ = _run(plots.MAX_BAR_ARTISTS)
    plots.plot_batch_composition(short, tmp_path / "short.png", max_rows_per_iteration=2048)
    assert len(stacks) == 1  # no mean panel


def _sweep_summary(sustained: list[bool]) -> dict[str, object]:
    rates = [{"rate_per_s": float(5 * (i + 1)), "offered_load_attainment": [1.0 - 0.2 * i] * 3,
              "mean_offered_load_attainment": 1.0 - 0.2 * i,
              "completion_conditioned_mean": 1.0 - 0.1 * i, "offered_rate_sustained": ok}
             for i, ok in enumerate(sustained)]
    return {"rates": rates, "capacity_rate_per_s": 5.0}


def test_the_sweep_plot_tells_policies_and_unsustained_rates_apart(tmp_path,
                                                                   monkeypatch) -> None:
    """Two policies that attain alike get different markers, the second
    drawn smaller inside the first; a rate whose offered rate was not
    sustained gets a hollow marker and a legend line saying so."""
    drawn: list[tuple[list[float], dict[str, object]]] = []
    plot = plots.Axes.plot

    def spy(axis, *args, **kwargs):
        drawn.append((list(args[0]) if args else [], kwargs))
        return plot(axis, *args, **kwargs)

    monkeypatch.setattr(plots.Axes, "plot", spy)
    same = _sweep_summary([True, True, False])
    plots.plot_sweep({"a": same, "b": same}, 0.9, tmp_path / "sweep.png")
    lines = [kwargs for _, kwargs in drawn if str(kwargs.get("label", "")).endswith(
        "offered-load attainment")]
    assert [k["marker"] for k in lines] == ["o", "s"]
    assert lines[0]["markersize"] > lines[1]["markersize"]
    hollow = [(x, kwargs) for x, kwargs in drawn if kwargs.get("markerfacecolor") == "white"]
    assert [x for x, _ in hollow] == [[15.0], [15.0], []]  # one each, then the legend's
    assert "not counted as capacity" in str(hollow[-1][1]["label"])
    drawn.clear()
    plots.plot_sweep({"a": _sweep_summary([True, True])}, 0.9, tmp_path / "all.png")
    assert not [kwargs for _, kwargs in drawn if kwargs.get("markerfacecolor") == "white"]
