"""0x07 saturation: 240 two-row requests over W = 1.3 s, by the real simulator.

Two arrivals every 10 ms over the first 1.2 s, 2 rows per 10 ms iteration,
least-slack with a four-live ``bounded`` overload contract.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from integration_helpers import (
    BURST_SLO,
    TICK_MS,
    closes,
    evaluate_run,
    gate,
    saturation_workload,
    simulate,
)

from iterserve.metrics import ObservationWindow, evaluate, window_overload

WINDOW = ObservationWindow(0.0, 1.3)


@pytest.fixture(scope="module")
def manifest():
    return saturation_workload()


@pytest.fixture(scope="module")
def bounded(manifest):
    return simulate(manifest, gate("bounded", max_live=4))


def test_offline_demand_exceeds_window_capacity(manifest) -> None:
    """Realized lengths are read offline here only, never by the policy."""
    realized = manifest.hidden.realized_output_tokens
    demand_rows = sum(r.num_prompt_tokens + realized[r.request_id] - 1
                      for r in manifest.online.requests)
    ledger = window_overload(demand_rows, window_s=WINDOW.duration_s, iteration_s=TICK_MS / 1000,
                             max_rows_per_iteration=manifest.online.capacity.max_num_batched_tokens)
    assert (ledger.num_demand_rows, ledger.num_capacity_rows) == (480, 260)
    assert ledger.num_unavoidable_excess_rows == 220


def test_bounded_reports_both_denominators(bounded) -> None:
    report = evaluate_run(bounded, WINDOW, "bounded")
    counts = report.outcomes
    assert counts.num_offered == 240
    assert (counts.num_slo_valid, counts.num_rejected) == (122, 118)
    assert (counts.num_completed_miss, counts.num_unfinished) == (0, 0)
    assert len(bounded.engine.rejected) == 118
    assert report.attainment.completion_conditioned == pytest.approx(1.0)
    assert round(100 * report.attainment.offered_load, 3) == 50.833
    assert report.rates.num_emitted_tokens == 244  # 122 * 2 rows <= 260 row capacity
    assert closes(report)
    assert report.to_dict()["attainment"]["completion_conditioned"]["label"].startswith(
        "diagnostic")


def test_executed_rows_never_exceed_window_capacity(bounded) -> None:
    in_window = [it for it in bounded.recorder.iterations if it.time_s < WINDOW.end_s]
    assert sum(it.num_rows for it in in_window) <= 260
    assert all(it.num_rows <= 2 for it in in_window)


def _tick_oracle():
    """tests/metrics/metrics_fixtures.py: an independent 0x07 tick oracle (10 ms
    ticks, 2 rows, least predicted slack, the spec's tie-break), not the simulator."""
    path = Path(__file__).resolve().parents[1] / "metrics" / "metrics_fixtures.py"
    spec = importlib.util.spec_from_file_location("saturation_tick_oracle", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_accept_all_rejects_nothing_and_attains_almost_nothing(manifest) -> None:
    """Without the cap nothing is rejected; least slack then serves the most
    overdue work first and nearly every request misses (the deadline-order
    domino under overload). The figures are derived twice: by the real
    simulator and by the independent tick oracle from the 0x07 rules; every
    request's outcome must agree, not only the totals."""
    report = evaluate_run(simulate(manifest, gate("accept-all")), WINDOW, "accept-all")
    oracle = _tick_oracle()
    derived = evaluate(oracle.least_slack_tick_oracle(oracle.saturation_arrivals(),
                                                      max_live=None),
                       BURST_SLO, WINDOW, label="oracle")
    outcome = {v.request_id: (v.outcome, v.missed_clocks) for v in report.request_outcomes}
    assert outcome == {v.request_id: (v.outcome, v.missed_clocks)
                       for v in derived.request_outcomes}
    fields = ("num_offered", "num_slo_valid", "num_completed", "num_completed_miss",
              "num_rejected", "num_unfinished")
    assert [getattr(report.outcomes, f) for f in fields] == \
        [getattr(derived.outcomes, f) for f in fields]
    assert report.attainment.offered_load == derived.attainment.offered_load
    counts = report.outcomes
    assert counts.num_rejected == 0 and closes(report)
    assert (counts.num_slo_valid, counts.num_completed, counts.num_unfinished) == (6, 98, 142)
    assert report.attainment.offered_load == pytest.approx(0.025)
