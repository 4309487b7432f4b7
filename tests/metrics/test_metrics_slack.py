"""0x07 deadline, headroom and predicted slack (F30-F34)."""

import math

import pytest
from metrics_fixtures import BURST_SLO

from iterserve.cost import BatchShape, FixedIterationCost, IterationCostModel
from iterserve.metrics import SloConfig, predicted_slack
from iterserve.metrics.slack import exclusive_endpoint_cost_s, headroom_s

TICK = FixedIterationCost(10.0)  # 0.01 s


def _slack_ms(now_s: float, outputs: int, last_s: float | None) -> float:
    estimate = predicted_slack(
        now_s,
        arrival_s=0.0,
        last_emission_s=last_s,
        num_outputs_emitted=outputs,
        num_prompt_rows_remaining=0 if outputs else 1,
        slo=BURST_SLO,
        cost_model=TICK,
    )
    return round(estimate.slack_s * 1000, 6)


def test_burst_decision_at_30_ms_picks_the_negative_slack_endpoints() -> None:
    # Accept-all at t=30 ms: C,D emitted at 30 ms; E,F still waiting since t=0.
    assert _slack_ms(0.03, 1, 0.03) == 10.0  # next-token deadline 50, finish 40
    assert _slack_ms(0.03, 0, None) == -10.0  # first-token deadline 30, finish 40


def test_estimate_reconciles_f32_to_f34() -> None:
    estimate = predicted_slack(
        0.012,
        arrival_s=0.0,
        last_emission_s=None,
        num_outputs_emitted=0,
        num_prompt_rows_remaining=5,
        slo=BURST_SLO,
        cost_model=TICK,
        max_prefill_rows_per_iteration=2,
    )
    assert estimate.clock == "ttft"
    assert estimate.deadline_s == pytest.approx(0.03)
    assert estimate.headroom_s == pytest.approx(0.018)
    assert estimate.predicted_cost_s == pytest.approx(0.03)  # three chunks: 2 + 2 + 1 rows
    assert estimate.predicted_finish_s == pytest.approx(0.042)
    assert estimate.slack_s == pytest.approx(estimate.headroom_s - estimate.predicted_cost_s)
    assert estimate.model_id == "fixed-iteration-v1(iteration_ms=10)"


def test_stream_moves_to_its_tbt_clock_without_changing_origin() -> None:
    estimate = predicted_slack(
        0.5,
        arrival_s=0.0,
        last_emission_s=0.49,
        num_outputs_emitted=3,
        num_prompt_rows_remaining=0,
        slo=BURST_SLO,
        cost_model=TICK,
    )
    assert estimate.clock == "tbt"
    assert estimate.deadline_s == pytest.approx(0.51)


def test_undeclared_clock_has_infinite_slack() -> None:
    estimate = predicted_slack(
        0.5,
        arrival_s=0.0,
        last_emission_s=0.49,
        num_outputs_emitted=3,
        num_prompt_rows_remaining=0,
        slo=SloConfig(ttft_ms=30.0),
        cost_model=TICK,
    )
    assert math.isinf(estimate.slack_s) and estimate.slack_s > 0


class _RowCost:
    model_id = "linear-test"
    spec = "linear-test"

    def predict_batch_ms(self, shape: BatchShape) -> float:
        return 1000 * self.predict_iteration_s(shape.num_prefill_rows, shape.num_decode_rows)

    def predict_iteration_s(self, num_prefill_rows: int, num_decode_rows: int) -> float:
        return 0.001 + 0.0001 * num_prefill_rows + 0.0002 * num_decode_rows


def test_any_model_satisfying_the_protocol_works() -> None:
    model = _RowCost()
    assert isinstance(model, IterationCostModel)
    cost = exclusive_endpoint_cost_s(model, num_outputs_emitted=0, num_prompt_rows_remaining=10)
    assert cost == pytest.approx(0.002)
    assert exclusive_endpoint_cost_s(
        model, num_outputs_emitted=1, num_prompt_rows_remaining=0
    ) == pytest.approx(0.0012)


def test_headroom_is_factual() -> None:
    assert headroom_s(0.03, 0.04) == pytest.approx(-0.01)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_outputs_emitted": 0, "last_emission_s": 0.1},
        {"num_outputs_emitted": 2, "last_emission_s": None},
    ],
)
def test_inconsistent_views_raise(kwargs) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        predicted_slack(
            0.0,
            arrival_s=0.0,
            num_prompt_rows_remaining=1,
            slo=BURST_SLO,
            cost_model=TICK,
            **kwargs,
        )


def test_fixed_model_validates() -> None:
    with pytest.raises(ValueError):
        FixedIterationCost(0.0)
