"""Per-client service read a time slice at a time equals the whole-array
formulas of the oracle (``tests/oracles/metrics_service.py``): the same facts in
the same (time, amount) order, the same running sums, for slices of any
size, clients with and without facts, bounds and client weights."""

from __future__ import annotations

from array import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lab_helpers import chat_mix_run

from iterserve.metrics import service_scan
from iterserve.metrics.event_scan import build_timelines
from iterserve.metrics.plots import _last_per_x
from iterserve.metrics.series import ServiceWeights, emissions_inside
from iterserve.metrics.service_scan import (
    FactBounds,
    client_fact_arrays,
    client_fact_counts,
    client_fact_slices,
    client_service_curves,
    client_service_totals,
    held_slices,
)
from iterserve.metrics.timeline import RequestTimeline
from oracles.metrics_service import client_increment_arrays, client_service_arrays

WEIGHTS = ServiceWeights(1.0, 2.0)
SLICE_SIZES = [1 << 20, 50, 7, 1]


@pytest.fixture(scope="module")
def timelines() -> list[RequestTimeline]:
    _, run = chat_mix_run(60, 80)  # 60 blocks preempt: rebuilds, resumes
    built = list(build_timelines(run.recorder.log()).values())
    # a client whose one request arrives and emits nothing inside the bounds below
    return [*built, RequestTimeline("idle-1", "idle", arrival_s=0.5)]


BOUNDS = [(-np.inf, np.inf), (3.0, np.inf), (2.0, 6.0)]


@pytest.mark.parametrize("max_facts", SLICE_SIZES)
@pytest.mark.parametrize("bounds", BOUNDS, ids=["all", "from-3", "2-to-6"])
@pytest.mark.parametrize("phis", [None, {"chat": 3.0}], ids=["unweighted", "weighted"])
def test_slices_join_into_the_whole_sorted_facts(timelines, monkeypatch, max_facts, bounds,
                                                 phis) -> None:
    monkeypatch.setattr(service_scan, "MAX_FACTS_PER_SLICE", max_facts)
    start_s, end_s = bounds
    whole = client_increment_arrays(timelines, WEIGHTS, start_s=start_s, end_s=end_s,
                                    client_weights=phis)
    fact_bounds = FactBounds(WEIGHTS, start_s, end_s, phis)
    assert client_fact_counts(timelines, fact_bounds) == {
        client: len(times) for client, (times, _) in whole.items()}
    num_slices = 0
    for client, (times, amounts) in whole.items():
        pieces = list(client_fact_slices(timelines, client, fact_bounds))
        num_slices += len(pieces)
        joined_times = np.concatenate([np.empty(0)] + [t for t, _ in pieces])
        joined_amounts = np.concatenate([np.empty(0)] + [a for _, a in pieces])
        assert joined_times.tolist() == times.tolist()
        assert joined_amounts.tolist() == amounts.tolist()
        held_times, held_amounts = client_fact_arrays(timelines, client, fact_bounds, len(times))
        assert held_times.tolist() == times.tolist()
        assert held_amounts.tolist() == amounts.tolist()
        held = list(held_slices(held_times, held_amounts))
        assert np.concatenate([np.empty(0)] + [t for t, _ in held]).tolist() == times.tolist()
        assert np.concatenate([np.empty(0)] + [a for _, a in held]).tolist() == amounts.tolist()
        for (earlier, _), (later, _) in zip(held, held[1:], strict=False):
            assert earlier[-1] < later[0]
        if max_facts == 1 and len(np.unique(times)) > 1:
            assert len(held) > 1
        for (earlier, _), (later, _) in zip(pieces, pieces[1:], strict=False):
            if len(earlier) and len(later):
                assert earlier[-1] < later[0]  # a distinct time never straddles two slices
    if max_facts == 1:
        assert num_slices > 2 * len(whole)  # small slices do cut


@pytest.mark.parametrize("max_facts", SLICE_SIZES)
@pytest.mark.parametrize("max_points", [0, 10**9])
def test_curves_and_totals_equal_the_whole_arrays(timelines, monkeypatch, max_facts,
                                                  max_points) -> None:
    from iterserve.metrics import plots

    monkeypatch.setattr(service_scan, "MAX_FACTS_PER_SLICE", max_facts)
    monkeypatch.setattr(plots, "MAX_STEP_VERTICES", max_points)
    for start_s in (-np.inf, 3.0):
        whole = client_service_arrays(timelines, WEIGHTS, start_s=start_s)
        curves = client_service_curves(timelines, WEIGHTS, start_s=start_s,
                                       max_points=max_points)
        assert list(curves) == list(whole) == sorted(whole)
        totals = client_service_totals(timelines, WEIGHTS, start_s=start_s)
        for client, (times, cumulative) in whole.items():
            want_times, want_cumulative = _last_per_x(times, cumulative)
            got_times, got_cumulative = curves[client]
            assert got_times.tolist() == want_times.tolist()
            assert got_cumulative.tolist() == want_cumulative.tolist()
            assert totals[client] == (float(cumulative[-1]) if len(cumulative) else 0.0)
    assert totals["idle"] == 0.0


ASCENDING = st.lists(st.floats(min_value=-5.0, max_value=5.0, width=32), max_size=12).map(sorted)
BOUND = st.sampled_from([-np.inf, np.inf, 0.0, -0.0, 1.5]) | st.floats(-6.0, 6.0, width=32)


@settings(max_examples=400, deadline=None)
@given(ASCENDING, BOUND, BOUND, st.booleans())
def test_emissions_inside_is_the_searchsorted_slice(times, start_s, end_s, compact) -> None:
    """The bisect search on the held emissions finds numpy's left insertion
    points of both bounds (``high`` at least ``low``), repeated times and
    bounds equal to a time included, compact (``array('d')``) or not."""
    emissions = array("d", times) if compact else tuple(times)
    timeline = RequestTimeline("r", "c", arrival_s=-10.0, emission_s=emissions)
    low, high = np.searchsorted(np.asarray(times, dtype=np.float64), (start_s, end_s),
                                side="left")
    assert emissions_inside(timeline, start_s, end_s) == (int(low), int(max(low, high)))
