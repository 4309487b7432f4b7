"""0x07 saturation fixture: 240 two-row requests over W = 1.3 s."""

import pytest
from metrics_fixtures import BURST_SLO, TICK_S, least_slack_tick_oracle, saturation_arrivals

from iterserve.metrics import ObservationWindow, evaluate, window_overload

WINDOW = ObservationWindow(0.0, 1.3)


def test_finite_window_overload_arithmetic() -> None:
    ledger = window_overload(240 * 2, window_s=1.3, iteration_s=TICK_S, max_rows_per_iteration=2)
    assert ledger.num_demand_rows == 480
    assert ledger.num_capacity_rows == 260
    assert ledger.num_unavoidable_excess_rows == 220
    assert ledger.is_overloaded


def test_bounded_run_reports_both_denominators() -> None:
    log = least_slack_tick_oracle(saturation_arrivals(), max_live=4)
    report = evaluate(log, BURST_SLO, WINDOW, label="four-live cap")
    counts = report.outcomes
    assert counts.num_offered == 240
    assert (counts.num_slo_valid, counts.num_rejected) == (122, 118)
    assert (counts.num_completed_miss, counts.num_unfinished) == (0, 0)
    assert report.attainment.completion_conditioned == pytest.approx(1.0)
    assert round(100 * report.attainment.offered_load, 3) == 50.833
    assert report.rates.num_emitted_tokens == 244  # 122 * 2 rows <= 260 capacity
    assert report.to_dict()["attainment"]["completion_conditioned"]["label"].startswith(
        "diagnostic"
    )
