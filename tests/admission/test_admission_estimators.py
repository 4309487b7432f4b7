"""Admission records, policies, registry and planner: unit and negative tests (0x05, 0x06)."""

from __future__ import annotations

import dataclasses

import pytest

from iterserve.admission import (
    ESTIMATOR_NAMES,
    AdmissionCandidate,
    AdmissionDecision,
    EstimatorConfig,
    IllegalWatermarkError,
    MaximumEstimator,
    OutputForecast,
    PointEstimator,
    QuantileEstimator,
    QuantileForecast,
    ReservationBudget,
    UnknownEstimatorError,
    WatermarkEstimator,
    build_estimator,
    estimate_reservation,
    evaluate_plan,
    future_append_rows,
    plan_admission,
    soft_ceiling_rows,
)

ROW = 131_072


def _forecast(point: int = 3, p90: int = 5) -> OutputForecast:
    return OutputForecast("v1", point, (QuantileForecast(0.5, point), QuantileForecast(0.9, p90)))


def _candidate(request_id: str = "r", *, emitted: int = 0, prompt: int = 10, uncached: int = 6,
               max_tokens: int = 8, priority: int = 0,
               forecast: OutputForecast | None = None) -> AdmissionCandidate:
    return AdmissionCandidate(request_id, 0, priority, prompt, uncached, emitted, max_tokens,
                              forecast or _forecast())


BUDGET = ReservationBudget(reserved_rows=0, hard_ceiling_rows=100, bytes_per_row=ROW,
                           allocation_epoch=7)


# ------------------------------------------------------------ future rows


def test_new_request_needs_uncached_prompt_plus_g_minus_one() -> None:
    """0x05: U + max(G_hat - 1, 0); stopping after output 1 appends no generated row."""
    new = _candidate(uncached=6)
    assert future_append_rows(new, 5) == 6 + 4
    assert future_append_rows(new, 1) == 6
    assert new.committed_rows == 4  # the cached prefix


def test_running_request_needs_g_minus_e() -> None:
    running = _candidate(emitted=3)
    assert future_append_rows(running, 5) == 2
    assert future_append_rows(running, 2) == 0  # clamped: never negative
    assert running.committed_rows == 10 + 3 - 1


def test_prompt_plus_max_tokens_would_overcount_by_one() -> None:
    new = _candidate(uncached=10)
    assert future_append_rows(new, new.max_tokens) == 10 + new.max_tokens - 1


# --------------------------------------------------------- negative records


@pytest.mark.parametrize("make", [
    lambda: OutputForecast("v", 0),
    lambda: OutputForecast("v", 5, (QuantileForecast(0.9, 4),)),  # point above p90
    lambda: OutputForecast("v", 1, (QuantileForecast(0.9, 5), QuantileForecast(0.5, 6))),
    lambda: QuantileForecast(1.0, 3),
    lambda: _candidate(forecast=_forecast(3, 9)),  # p90 above the declared maximum
    lambda: _candidate(uncached=11),
    lambda: _candidate(emitted=9),
    lambda: _candidate(prompt=0, uncached=0),
    lambda: ReservationBudget(-1, 10, ROW, 0),
    lambda: ReservationBudget(0, 10, 0, 0),
])
def test_invalid_records_are_refused(make: object) -> None:
    with pytest.raises(ValueError):
        make()  # type: ignore[operator]


def test_records_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        _candidate().priority = 3  # type: ignore[misc]


def test_missing_quantile_fails_loudly() -> None:
    with pytest.raises(KeyError, match="q=0.99"):
        QuantileEstimator(0.99).forecast_total_outputs(_candidate())


# ----------------------------------------------------------------- policies


def test_each_family_forecasts_differently() -> None:
    candidate = _candidate()
    assert MaximumEstimator().forecast_total_outputs(candidate) == 8
    assert PointEstimator().forecast_total_outputs(candidate) == 3
    assert QuantileEstimator(0.9).forecast_total_outputs(candidate) == 5
    watermark = WatermarkEstimator(QuantileEstimator(0.9), 4)
    assert watermark.forecast_total_outputs(candidate) == 5 and watermark.watermark_rows == 4
    assert watermark.estimator_id == "watermark:quantile:p90:w4"


def test_registry_builds_every_name_and_fails_loudly() -> None:
    assert ESTIMATOR_NAMES == ("max", "point", "quantile", "watermark")
    for name in ESTIMATOR_NAMES:
        estimator = build_estimator(EstimatorConfig(name))
        assert estimator.estimator_id.startswith(name)
    with pytest.raises(UnknownEstimatorError, match="max, point, quantile, watermark"):
        build_estimator(EstimatorConfig("oracle"))
    with pytest.raises(UnknownEstimatorError):
        build_estimator(EstimatorConfig("watermark", watermark_rows=1,
                                                     watermark_base="nope"))


@pytest.mark.parametrize("config", [
    lambda: EstimatorConfig("max", watermark_rows=2),
    lambda: EstimatorConfig("watermark", watermark_base="watermark"),
    lambda: WatermarkEstimator(PointEstimator(), -1),
    lambda: WatermarkEstimator(WatermarkEstimator(PointEstimator(), 1), 1),
])
def test_illegal_watermarks_are_refused(config: object) -> None:
    with pytest.raises(ValueError):
        config()  # type: ignore[operator]


def test_soft_ceiling() -> None:
    assert soft_ceiling_rows(28, 4) == 24
    with pytest.raises(IllegalWatermarkError):
        soft_ceiling_rows(28, 29)
    with pytest.raises(IllegalWatermarkError):
        plan_admission([_candidate()], WatermarkEstimator(PointEstimator(), 101), BUDGET)


# ------------------------------------------------------------------ planner


def test_estimate_carries_policy_prediction_and_ceilings() -> None:
    estimate = estimate_reservation(_candidate(), WatermarkEstimator(PointEstimator(), 10), BUDGET)
    assert (estimate.policy_id, estimate.prediction_version) == ("watermark:point:w10", "v1")
    assert estimate.forecast_total_outputs == 3
    assert estimate.estimated_append_rows == 6 + 2
    assert estimate.estimated_append_bytes == 8 * ROW
    assert (estimate.hard_ceiling_rows, estimate.soft_ceiling_rows) == (100, 90)


def test_fifo_stops_at_the_first_candidate_that_does_not_fit() -> None:
    """Head-of-line: a later, smaller request does not jump a deferred one."""
    budget = dataclasses.replace(BUDGET, hard_ceiling_rows=20)
    big = _candidate("big", uncached=10, max_tokens=8)  # max: 10 + 7 = 17
    small = _candidate("small", uncached=1, max_tokens=8)  # max: 1 + 7 = 8
    tiny = _candidate("tiny", uncached=1, max_tokens=1, forecast=OutputForecast("v1", 1))
    plan = plan_admission([big, small, tiny], MaximumEstimator(), budget)
    assert [i.decision for i in plan.intents] == [AdmissionDecision.ADMIT,
                                                  AdmissionDecision.DEFER_CAPACITY,
                                                  AdmissionDecision.DEFER_CAPACITY]
    assert plan.reserved_rows_after == 17 and plan.allocation_epoch == 7
    assert [i.request_id for i in plan.deferred] == ["small", "tiny"]


def test_planner_refuses_duplicate_generations() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        plan_admission([_candidate(), _candidate()], PointEstimator(), BUDGET)


def test_plan_is_deterministic_and_pure() -> None:
    candidates = [_candidate("a"), _candidate("b")]
    assert plan_admission(candidates, PointEstimator(), BUDGET) == \
        plan_admission(candidates, PointEstimator(), BUDGET)


# ---------------------------------------------------------------- evaluator


def test_evaluator_needs_every_realized_length_and_the_same_candidates() -> None:
    candidates = [_candidate("a"), _candidate("b")]
    plan = plan_admission(candidates, PointEstimator(), BUDGET)
    with pytest.raises(KeyError, match="b"):
        evaluate_plan(plan, candidates, {"a": 3}, ROW)
    with pytest.raises(ValueError, match="not made from"):
        evaluate_plan(plan, candidates[:1], {"a": 3, "b": 3}, ROW)


def test_evaluator_ties_break_on_latest_admission() -> None:
    budget = dataclasses.replace(BUDGET, hard_ceiling_rows=16)
    candidates = [_candidate(name, prompt=2, uncached=2, priority=priority)
                  for name, priority in (("a", 0), ("b", 0), ("c", 5))]
    plan = plan_admission(candidates, PointEstimator(), budget)  # 3 * (2 + 2) = 12 <= 16
    result = evaluate_plan(plan, candidates, {"a": 8, "b": 8, "c": 8}, ROW)  # 3 * 9 = 27
    assert result.hard_breach.rows == 11
    assert [v.label for v in result.preemption_candidates] == ["b:0", "a:0"]  # 9 + 9 >= 11
