"""The simulate report read from events.jsonl in one streaming pass equals
the report of the held event list, and both reads equal the oracles: the
timelines of the event objects one at a time (``tests/oracles/metrics_events.py``)
and, for the per-token sums that moved to float64 arrays, the Python
formulas they replaced (``tests/oracles/metrics_service.py`` and here).
"""

from __future__ import annotations

import math
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from lab_helpers import chat_mix_run
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from iterserve.metrics import SloConfig, evaluate
from iterserve.metrics.event_scan import build_timelines, scan_event_list, scan_events
from iterserve.metrics.events import EventLogError, iter_jsonl, read_jsonl
from iterserve.metrics.fairness import evaluate_fairness
from iterserve.metrics.plots import _step_cdf
from iterserve.metrics.run_summary import summarize_run
from iterserve.metrics.series import ServiceWeights
from iterserve.metrics.slo import ObservationWindow
from iterserve.metrics.time_unit import clock_time_unit
from iterserve.sim.report import (
    default_window,
    service_weights_of,
    write_metric_outputs,
)
from oracles.metrics_events import timelines_of, timelines_of_sorted
from oracles.metrics_fairness import client_figures, gap_on
from oracles.metrics_service import (
    client_service_arrays,
    client_service_series,
)

SLO = SloConfig(ttft_ms=500, tbt_ms=100)
WEIGHTS = ServiceWeights(1.0, 2.0)


def _run(num_blocks: int, events=None):
    manifest, run = chat_mix_run(num_blocks, 120, events)
    return manifest.online, run


@pytest.fixture(scope="module", params=[4000, 60], ids=["roomy", "preempting"])
def runs(request, tmp_path_factory):
    """The same seeded run twice: events held in memory, and streamed."""
    tmp = tmp_path_factory.mktemp(f"streamed{request.param}")
    online, in_memory = _run(request.param)
    with (tmp / "events.jsonl").open("w", encoding="utf-8") as stream:
        _, streamed = _run(request.param, events=stream)
    return online, in_memory, streamed, tmp


@pytest.mark.parametrize("window", [None, (2.0, 6.0)], ids=["default", "explicit"])
def test_streamed_report_equals_the_event_list_report(runs, tmp_path, window) -> None:
    online, in_memory, streamed, streamed_dir = runs
    log = in_memory.recorder.log()
    observation = default_window(log) if window is None else ObservationWindow(*window)
    unit = clock_time_unit(online.clock, in_memory.recorder.seconds_per_clock_unit)
    expected_summary = summarize_run(
        list(log), observation, unit, label="L", iterations=in_memory.recorder.iterations,
        resources=in_memory.recorder.samples, max_num_batched_tokens=online.capacity.max_num_batched_tokens,
        max_num_seqs=online.capacity.max_num_seqs)
    expected_report = evaluate(log, SLO, observation, label="L",
                               service_weights=service_weights_of(online)[0])
    outputs = write_metric_outputs(streamed_dir, streamed, online, SLO,
                                   None if window is None else observation, "L", plots=False)
    assert outputs.summary is not None and outputs.report is not None
    assert outputs.summary.to_dict() == expected_summary.to_dict()
    assert outputs.report.to_dict(include_samples=True) == expected_report.to_dict(
        include_samples=True)
    if window is None:  # the held run writes the same files from its list
        held = write_metric_outputs(tmp_path, in_memory, online, SLO, None, "L", plots=False)
        assert (tmp_path / "report.md").read_text() == (streamed_dir / "report.md").read_text()
        assert (tmp_path / "events.jsonl").read_bytes() == (
            streamed_dir / "events.jsonl").read_bytes()
        assert held.fairness == outputs.fairness


def test_preemptions_are_counted_the_same(runs) -> None:
    _, in_memory, _, streamed_dir = runs
    scan = scan_events(streamed_dir / "events.jsonl")
    window = scan.default_window()
    assert window == default_window(in_memory.recorder.log())
    modes = [e.mode for e in in_memory.recorder.log() if e.kind == "preempt"]
    assert scan.preempt_modes(window) == modes
    assert scan.num_resumes(window) == sum(e.kind == "resume" for e in in_memory.recorder.log())


def test_the_scan_builds_the_timelines_of_the_list(runs) -> None:
    _, in_memory, _, streamed_dir = runs
    path = streamed_dir / "events.jsonl"
    log = in_memory.recorder.log()
    for end_s in (math.inf, 3.0):
        want = timelines_of(log, end_s=end_s)
        assert scan_events(path, end_s=end_s).timelines == want
        assert build_timelines(log, end_s=end_s) == want


def test_a_compact_scan_holds_the_same_timelines_in_float_arrays(runs) -> None:
    """The report's scan keeps each request's emission times in an
    ``array('d')`` (8 bytes a token); everything else, and every value, is
    the list's."""
    from array import array
    from dataclasses import replace

    _, in_memory, _, streamed_dir = runs
    compact = scan_events(streamed_dir / "events.jsonl", compact=True).timelines
    assert all(isinstance(t.emission_s, array) and t.emission_s.typecode == "d"
               for t in compact.values())
    as_tuples = {request_id: replace(t, emission_s=tuple(t.emission_s))
                 for request_id, t in compact.items()}
    assert as_tuples == timelines_of(in_memory.recorder.log())


def test_an_unsorted_file_is_refused(tmp_path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"kind": "arrival", "time_s": 2.0, "request_id": "a", "client_id": "c", '
                    '"num_prompt_tokens": 4}\n{"kind": "arrival", "time_s": 1.0, '
                    '"request_id": "b", "client_id": "c", "num_prompt_tokens": 4}\n')
    with pytest.raises(EventLogError, match="precedes"):
        scan_events(path)
    assert len(build_timelines(read_jsonl(path))) == 2  # the list path sorts


def test_service_arrays_equal_the_point_series(runs) -> None:
    _, in_memory, _, _ = runs
    timelines = list(build_timelines(in_memory.recorder.log()).values())
    for start_s in (-np.inf, 3.0):
        series = client_service_series(timelines, WEIGHTS, start_s=start_s)
        arrays = client_service_arrays(timelines, WEIGHTS, start_s=start_s)
        assert list(series) == list(arrays)
        for client, points in series.items():
            times, cumulative = arrays[client]
            assert times.tolist() == [p.time_s for p in points]
            assert cumulative.tolist() == [p.cumulative_service for p in points]


@pytest.mark.parametrize("max_facts", [1 << 20, 7, 1])
def test_fairness_sums_equal_the_python_reference(runs, monkeypatch, max_facts) -> None:
    from iterserve.metrics import service_scan

    monkeypatch.setattr(service_scan, "MAX_FACTS_PER_SLICE", max_facts)
    _, in_memory, _, _ = runs
    log = in_memory.recorder.log()
    window = default_window(log)
    timelines = list(build_timelines(log).values())
    phis = {"chat": 3.0, "batch": 1.0}
    report = evaluate_fairness(timelines, window, WEIGHTS, phis)
    reference = client_figures(timelines, window, WEIGHTS, phis)
    assert {c.client_id: (c.service, c.num_completed_events, c.longest_unserved_s)
            for c in report.per_client} == reference
    assert report.max_backlogged_gap is not None


@pytest.mark.parametrize("samples", [[], [3.0], [0.3, 0.1 + 0.2, 7.0, 1e-9, 2.5, 0.3]])
def test_the_cdf_plot_gets_the_values_of_the_list_formula(samples) -> None:
    figure = Figure()
    FigureCanvasAgg(figure)
    axis = figure.subplots()
    _step_cdf(axis, samples, "x")
    x, y = axis.lines[0].get_data()
    ordered = sorted(samples)
    if not ordered:
        assert len(x) == 0
        return
    assert list(np.asarray(x)) == [ordered[0], *ordered]
    assert list(np.asarray(y)) == [0.0, *((i + 1) / len(ordered) for i in range(len(ordered)))]


def test_a_cut_s_tokens_share_one_time_object(runs) -> None:
    """The memory half: a timeline keeps one float object per cut, not per token."""
    _, _, _, streamed_dir = runs
    events = list(iter_jsonl(streamed_dir / "events.jsonl"))
    assert events == read_jsonl(streamed_dir / "events.jsonl")
    same_time = [(a, b) for a, b in pairwise(events) if a.time_s == b.time_s and a.time_s]
    assert same_time and all(a.time_s is b.time_s for a, b in same_time)


def _post_step(x, y, at):
    """y of the last point with x <= at (NaN before the first): the curve
    ``step(where="post")`` draws."""
    index = np.searchsorted(x, at, side="right") - 1
    return np.where(index >= 0, np.asarray(y)[np.maximum(index, 0)], np.nan)


def test_merging_equal_x_keeps_the_step_curve(monkeypatch) -> None:
    from iterserve.metrics import plots

    rng = np.random.default_rng(15)
    x = np.sort(rng.integers(0, 40, 500).astype(np.float64))  # many repeats
    y = np.cumsum(rng.random(500))
    assert plots._last_per_x(x, y)[0] is x  # below the limit: as given
    monkeypatch.setattr(plots, "MAX_STEP_VERTICES", 10)
    merged_x, merged_y = plots._last_per_x(x, y)
    assert len(merged_x) == len(np.unique(x)) < len(x)
    grid = np.concatenate([x, x + 0.5, [-1.0]])
    assert np.array_equal(_post_step(merged_x, merged_y, grid), _post_step(x, y, grid),
                          equal_nan=True)


def test_tbt_samples_are_one_float64_array_of_the_sorted_gaps(runs) -> None:
    """The samples equal the sorted gaps, tuple timelines or compact ones,
    held as one float64 array: 8 bytes a gap (they replaced a tuple whose
    equal neighbours shared one float object)."""
    from iterserve.metrics.clocks import EmissionGaps, request_clocks
    from iterserve.metrics.report import latency_samples

    _, in_memory, _, streamed_dir = runs
    clocks = [request_clocks(t) for t in build_timelines(in_memory.recorder.log()).values()]
    samples = latency_samples(clocks, [True] * len(clocks))
    gaps = sorted(gap for clock in clocks for gap in clock.tbt_gaps_s)
    assert samples.tbt_s.tolist() == gaps
    assert samples.tbt_s.dtype == np.float64 and samples.tbt_s.nbytes == 8 * len(gaps)
    compact = scan_events(streamed_dir / "events.jsonl", compact=True).timelines
    compact_clocks = [request_clocks(t) for t in compact.values()]
    assert all(isinstance(c.tbt_gaps_s, EmissionGaps) for c in compact_clocks)
    assert [g for c in compact_clocks for g in c.tbt_gaps_s] == [
        g for c in clocks for g in c.tbt_gaps_s]  # read when asked, the same gaps
    assert latency_samples(compact_clocks, [True] * len(clocks)).tbt_s.tolist() == gaps


def test_a_merged_cdf_keeps_the_fractions_of_the_full_curve(monkeypatch) -> None:
    """Past ``MAX_STEP_VERTICES`` the CDF computes its fractions only at the
    kept vertices (no n-point array): the values :func:`_last_per_x` keeps."""
    from iterserve.metrics import plots

    rng = np.random.default_rng(7)
    samples = np.sort(rng.integers(0, 50, 400).astype(np.float64) / 8)
    monkeypatch.setattr(plots, "MAX_STEP_VERTICES", 10)
    figure = Figure()
    FigureCanvasAgg(figure)
    axis = figure.subplots()
    _step_cdf(axis, samples, "x")
    x, y = axis.lines[0].get_data()
    fractions = np.arange(1, len(samples) + 1, dtype=np.float64) / len(samples)
    want_x, want_y = plots._last_per_x(samples, fractions)
    assert np.asarray(x).tolist() == [samples[0], *want_x.tolist()]
    assert np.asarray(y).tolist() == [0.0, *want_y.tolist()]
    assert len(want_x) == len(np.unique(samples))


def test_chunked_fairness_scans_equal_the_whole_array_formulas() -> None:
    """The service total and the longest unserved gap read per-token facts a
    slice at a time (``service_scan.running_totals``,
    ``fairness_scan.UnservedScan``); fed slices of any size they give the
    whole-array values exactly."""
    from iterserve.metrics.fairness_scan import UnservedScan
    from iterserve.metrics.service_scan import running_totals

    rng = np.random.default_rng(3)
    times = np.sort(rng.integers(0, 300, 50).astype(np.float64) / 7)
    amounts = rng.random(50) * 3
    want_total = float(np.cumsum(amounts)[-1])
    want_gap = float(np.diff(np.concatenate([[-1.0], times, [50.0]])).max())
    for chunk in (1, 3, 7, 1 << 20):
        starts = [i for i in range(0, 50, chunk) if i == 0 or times[i] != times[i - 1]]
        pieces = [(times[a:b], amounts[a:b]) for a, b in pairwise([*starts, 50])]
        totals = [float(cumulative[-1]) for _, cumulative in running_totals(iter(pieces))]
        assert totals[-1] == want_total
        scan = UnservedScan([(-1.0, 50.0)])
        for piece, _ in pieces:
            scan.feed(piece)
        assert scan.longest_s() == want_gap
    assert UnservedScan([(1.0, 4.5)]).longest_s() == 3.5


@pytest.mark.parametrize("seed", range(6))
def test_the_backlogged_gap_walk_on_arrays_equals_the_python_walk(seed) -> None:
    from iterserve.metrics.fairness import Steps, _gap_on

    rng = np.random.default_rng(seed)

    def steps(n):
        times = np.sort(rng.integers(0, 40, n).astype(np.float64) / 4)
        amounts = rng.choice([1.0, 2.0, 0.5, 3.25], n)
        order = np.lexsort((amounts, times))
        return Steps(times[order], amounts[order])

    f_steps, g_steps = steps(int(rng.integers(0, 60))), steps(int(rng.integers(0, 60)))
    for joint in ((0.0, 10.0), (2.5, 7.25), (20.0, 30.0)):
        assert _gap_on(joint, "f", "g", f_steps, g_steps) == gap_on(
            joint, "f", "g", f_steps, g_steps)


@pytest.mark.parametrize("chunk", [1, 3, 64, 1 << 20])
@pytest.mark.parametrize("scale", [1000.0, 1 / 0.008, 1.0])
def test_a_scaled_cdf_read_in_chunks_draws_the_vertices_of_the_scaled_copy(monkeypatch, chunk,
                                                                           scale) -> None:
    """Past ``MAX_STEP_VERTICES`` an ascending sample is scaled a chunk at a
    time (no n-point copy): the vertices are those of the whole scaled copy
    the latency plot used to make."""
    from iterserve.metrics import plots

    rng = np.random.default_rng(11)
    samples = np.sort(rng.integers(0, 60, 401).astype(np.float64) / 7 * 1e-3)
    monkeypatch.setattr(plots, "MAX_STEP_VERTICES", 10)

    def vertices(values, **kwargs):
        figure = Figure()
        FigureCanvasAgg(figure)
        axis = figure.subplots()
        _step_cdf(axis, values, "x", **kwargs)
        x, y = axis.lines[0].get_data()
        return np.asarray(x).tolist(), np.asarray(y).tolist()

    want = vertices(samples * scale)
    monkeypatch.setattr(plots, "_CDF_CHUNK", chunk)
    assert vertices(samples, scale=scale) == want
    assert vertices(samples[::-1].copy(), scale=scale) == want  # unsorted: the sorted path


_HEAD = ('{"kind": "arrival", "time_s": 1.0, "request_id": "a", "client_id": "c", '
         '"num_prompt_tokens": 4}\n'
         '{"kind": "admit", "time_s": 1.0, "request_id": "a"}\n'
         '{"kind": "first_token", "time_s": 2.0, "request_id": "a"}\n')
_TOKEN_CASES = {
    "valid": '{"kind": "token", "time_s": 3.0, "request_id": "a", "token_index": 1}',
    "skips an index": '{"kind": "token", "time_s": 3.0, "request_id": "a", "token_index": 3}',
    "unknown request": '{"kind": "token", "time_s": 3.0, "request_id": "b", "token_index": 1}',
    "earlier time": '{"kind": "token", "time_s": 1.5, "request_id": "a", "token_index": 1}',
    "index 0": '{"kind": "token", "time_s": 3.0, "request_id": "a", "token_index": 0}',
    "bool index": '{"kind": "token", "time_s": 3.0, "request_id": "a", "token_index": true}',
    "int time": '{"kind": "token", "time_s": 3, "request_id": "a", "token_index": 1}',
    "NaN time": '{"kind": "token", "time_s": NaN, "request_id": "a", "token_index": 1}',
    "negative time": '{"kind": "token", "time_s": -0.5, "request_id": "a", "token_index": 1}',
    "empty id": '{"kind": "token", "time_s": 3.0, "request_id": "", "token_index": 1}',
    "extra field": '{"kind": "token", "time_s": 3.0, "request_id": "a", "token_index": 1, '
                   '"x": 1}',
    "missing index": '{"kind": "token", "time_s": 3.0, "request_id": "a", "y": 1}',
    "after finish": '{"kind": "finish", "time_s": 2.5, "request_id": "a", "reason": "length", '
                    '"num_output_tokens": 1}\n'
                    '{"kind": "token", "time_s": 3.0, "request_id": "a", "token_index": 1}',
    "while preempted": '{"kind": "preempt", "time_s": 2.5, "request_id": "a", '
                       '"mode": "recompute"}\n'
                       '{"kind": "token", "time_s": 3.0, "request_id": "a", "token_index": 1}',
    "after the window": '{"kind": "token", "time_s": 9.0, "request_id": "a", "token_index": 7}',
}


def _outcome(read, *args, **kwargs) -> object:
    try:
        return read(*args, **kwargs)
    except EventLogError as error:
        return f"EventLogError: {error}"


def _scans_as_the_event_path(tmp_path: Path, text: str) -> Path:
    """Write ``text`` as events.jsonl; its scan must give the event path's
    timelines or raise its error, with and without a window's end, and so
    must the scan of its event list (sorted by time first)."""
    path = tmp_path / "events.jsonl"
    path.write_text(text + "\n")
    events = _outcome(lambda: list(iter_jsonl(path)))
    for end_s in (math.inf, 5.0):
        scanned = _outcome(lambda *a, **k: scan_events(*a, **k).timelines, path, end_s=end_s)
        reference = _outcome(timelines_of_sorted, iter_jsonl(path), end_s=end_s)
        assert scanned == reference
        if not isinstance(events, str):
            listed = _outcome(lambda **k: scan_event_list(events, **k).timelines, end_s=end_s)
            assert listed == _outcome(timelines_of, events, end_s=end_s)
    return path


@pytest.mark.parametrize("case", sorted(_TOKEN_CASES))
def test_a_token_line_reads_as_the_event_path_reads_it(tmp_path, case: str) -> None:
    """The scan's token shortcut (no event object) keeps every rule and
    error of the event path: the same timelines or the same message."""
    path = _scans_as_the_event_path(tmp_path, _HEAD + _TOKEN_CASES[case])
    if case == "valid":
        assert scan_events(path).timelines["a"].emission_s == (2.0, 3.0)


_RUN_HEAD = "".join(
    f'{{"kind": "arrival", "time_s": 1.0, "request_id": "{rid}", "client_id": "c", '
    f'"num_prompt_tokens": 4}}\n{{"kind": "admit", "time_s": 1.0, "request_id": "{rid}"}}\n'
    for rid in "ab") + "".join(
    f'{{"kind": "first_token", "time_s": 2.0, "request_id": "{rid}"}}\n' for rid in "ab")
_RUN = '{"kind": "tokens", "time_s": %s, "request_ids": %s, "token_indices": %s%s}'
_TOKENS_LINE_CASES = {
    "valid": _RUN % ("3.0", '["a", "b"]', "[1, 1]", ""),
    "one request twice": _RUN % ("3.0", '["a", "a", "b"]', "[1, 2, 1]", ""),
    "a repeated index": _RUN % ("3.0", '["a", "a"]', "[1, 1]", ""),
    "the second skips an index": _RUN % ("3.0", '["a", "b"]', "[1, 3]", ""),
    "unknown request first": _RUN % ("3.0", '["c", "b"]', "[1, 1]", ""),
    "earlier time": _RUN % ("1.5", '["a", "b"]', "[1, 1]", ""),
    "index 0": _RUN % ("3.0", '["a", "b"]', "[1, 0]", ""),
    "bool index": _RUN % ("3.0", '["a", "b"]', "[1, true]", ""),
    "int time": _RUN % ("3", '["a", "b"]', "[1, 1]", ""),
    "NaN time": _RUN % ("NaN", '["a", "b"]', "[1, 1]", ""),
    "negative time": _RUN % ("-0.5", '["a", "b"]', "[1, 1]", ""),
    "empty id": _RUN % ("3.0", '["a", ""]', "[1, 1]", ""),
    "int id": _RUN % ("3.0", '["a", 7]', "[1, 1]", ""),
    "a list as an id": _RUN % ("3.0", '["a", ["b"]]', "[1, 1]", ""),
    "after a cancel": '{"kind": "cancel", "time_s": 2.5, "request_id": "b", "reason": "client"}\n'
                      + _RUN % ("3.0", '["a", "b"]', "[1, 1]", ""),
    "extra field": _RUN % ("3.0", '["a", "b"]', "[1, 1]", ', "x": 1'),
    "missing field": '{"kind": "tokens", "time_s": 3.0, "request_ids": ["a"]}',
    "ids not a list": _RUN % ("3.0", '"ab"', "[1, 1]", ""),
    "unequal lengths": _RUN % ("3.0", '["a", "b"]', "[1]", ""),
    "empty run": _RUN % ("3.0", "[]", "[]", ""),
    "after finish": '{"kind": "finish", "time_s": 2.5, "request_id": "b", "reason": "length", '
                    '"num_output_tokens": 1}\n' + _RUN % ("3.0", '["a", "b"]', "[1, 1]", ""),
    "while preempted": '{"kind": "preempt", "time_s": 2.5, "request_id": "b", '
                       '"mode": "recompute"}\n' + _RUN % ("3.0", '["a", "b"]', "[1, 1]", ""),
    "after a resume": '{"kind": "preempt", "time_s": 2.5, "request_id": "b", '
                      '"mode": "recompute"}\n{"kind": "resume", "time_s": 2.6, "request_id": "b"}\n'
                      + _RUN % ("3.0", '["a", "b"]', "[1, 1]", ""),
    "an index as a float": _RUN % ("3.0", '["a", "b"]', "[1, 1.0]", ""),
    "after the window": _RUN % ("9.0", '["a", "b"]', "[1, 7]", ""),
    "an entry past the window breaks a field": _RUN % ("9.0", '["a", "b"]', "[1, 0]", ""),
}


@pytest.mark.parametrize("case", sorted(_TOKENS_LINE_CASES))
def test_a_tokens_line_reads_as_its_token_events(tmp_path, case: str) -> None:
    """A ``tokens`` line (a run of tokens at one time) is its token events
    in order: the scan's shortcut keeps every rule and error of the event
    path, and a malformed line or entry is refused naming its line."""
    path = _scans_as_the_event_path(tmp_path, _RUN_HEAD + _TOKENS_LINE_CASES[case])
    outcome = _outcome(lambda p: scan_events(p).timelines, path)
    # a bool index and an int time are what TokenEvent accepts (as the token line's cases)
    if case in ("valid", "one request twice", "bool index", "int time", "after a resume"):
        assert not isinstance(outcome, str)
    else:
        assert isinstance(outcome, str)
    if case == "valid":
        assert scan_events(path).timelines["b"].emission_s == (2.0, 3.0)
        assert scan_events(path).num_events == 8
    if case == "after the window":  # a rule past the window's end is not checked; a field is
        assert not isinstance(_outcome(scan_events, path, end_s=5.0), str)
    if case in ("extra field", "missing field", "ids not a list", "unequal lengths", "empty run",
                "index 0", "empty id", "NaN time"):
        assert f"{path}:7: tokens" in outcome
    if case in ("index 0", "empty id"):
        assert "tokens entry 1: " in outcome
