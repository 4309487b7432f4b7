"""0x07 outcome partition, window edges, cancellation and rate units."""

import dataclasses

import pytest
from metrics_fixtures import merged, rejected, stream

from iterserve.metrics import (
    AdmitEvent,
    ArrivalEvent,
    CancelEvent,
    ObservationWindow,
    OpenReason,
    Outcome,
    OutcomeCounts,
    PreemptEvent,
    SloConfig,
    evaluate,
)
from iterserve.metrics.outcomes import PartitionError

SLO = SloConfig(ttft_ms=100.0, tbt_ms=50.0)


def _log():  # type: ignore[no-untyped-def]
    return merged(
        stream("valid", 0.0, [0.05, 0.1, 0.15], client_id="a"),
        stream("late", 0.0, [0.3, 0.32], client_id="a"),
        stream("stall", 0.1, [0.15, 0.3], client_id="b"),
        rejected("rej", 0.2),
        stream("running", 0.3, [0.35, 0.4, 0.9], client_id="b"),  # finishes after W
        [ArrivalEvent(0.4, "queued"), CancelEvent(0.45, "queued", reason="client")],
        [ArrivalEvent(0.5, "waiting")],
        [
            ArrivalEvent(0.5, "preempted"),
            AdmitEvent(0.5, "preempted"),
            PreemptEvent(0.55, "preempted"),
        ],
        stream("before", 0.0 + 0.01, [0.02]),  # arrives inside W (start 0)
        stream("after", 0.7, [0.75]),  # arrives after W: not offered
    )


WINDOW = ObservationWindow(0.0, 0.6)


def test_every_offered_request_lands_in_exactly_one_class() -> None:
    report = evaluate(_log(), SLO, WINDOW)
    verdicts = {item.request_id: item for item in report.request_outcomes}
    assert "after" not in verdicts
    assert verdicts["valid"].outcome is Outcome.SLO_VALID
    assert verdicts["late"].missed_clocks == ("ttft",)
    assert verdicts["stall"].missed_clocks == ("tbt",)
    assert verdicts["rej"].outcome is Outcome.REJECTED
    assert verdicts["running"].open_reason is OpenReason.RUNNING
    assert verdicts["queued"].open_reason is OpenReason.CANCELLED
    assert verdicts["waiting"].open_reason is OpenReason.WAITING
    assert verdicts["preempted"].open_reason is OpenReason.PREEMPTED
    counts = report.outcomes.to_dict()
    assert counts["num_offered"] == 9
    assert (counts["num_slo_valid"], counts["num_completed_miss"]) == (2, 2)
    assert (counts["num_rejected"], counts["num_unfinished"]) == (1, 4)
    assert counts["unfinished_reasons"] == {
        "cancelled": 1,
        "preempted": 1,
        "running": 1,
        "waiting": 1,
    }
    assert counts["num_admitted"] == 6


def test_token_ledger_counts_partial_streams_only_in_throughput() -> None:
    report = evaluate(_log(), SLO, WINDOW)
    rates = report.rates
    # valid 3 + late 2 + stall 2 + running 2 (third output after W) + before 1
    assert rates.num_emitted_tokens == 10
    assert rates.num_slo_valid_tokens == 3 + 1
    assert rates.emitted_token_throughput_per_s == pytest.approx(10 / 0.6)
    assert rates.slo_valid_token_goodput_per_s == pytest.approx(4 / 0.6)
    assert rates.request_goodput_per_s == pytest.approx(2 / 0.6)
    assert rates.offered_rate_per_s == pytest.approx(9 / 0.6)


def test_finish_at_window_end_is_unfinished() -> None:
    report = evaluate(stream("r", 0.0, [0.1, 0.2]), SLO, ObservationWindow(0.0, 0.2))
    assert report.request_outcomes[0].open_reason is OpenReason.RUNNING


def test_per_client_ledgers_close_and_carry_service() -> None:
    report = evaluate(_log(), SLO, WINDOW).to_dict()
    clients = report["per_client"]
    assert sum(entry["outcomes"]["num_offered"] for entry in clients.values()) == 9
    assert clients["a"]["service_in_window"] == pytest.approx(
        2 * 1 + 5
    )  # 2 prompt rows + 5 outputs


def test_attainment_is_none_on_empty_denominators() -> None:
    report = evaluate(rejected("r", 0.0), SLO, ObservationWindow(0.0, 1.0))
    assert report.attainment.offered_load == 0.0
    assert report.attainment.admitted is None
    assert report.attainment.completion_conditioned is None


def test_a_ledger_that_does_not_close_raises() -> None:
    good = evaluate(_log(), SLO, WINDOW).outcomes
    with pytest.raises(PartitionError, match="does not close"):
        dataclasses.replace(good, num_offered=good.num_offered + 1)
    with pytest.raises(PartitionError):
        OutcomeCounts(1, 1, 1, 0, 0, 0, 1, unfinished_reasons=(("running", 1),))


@pytest.mark.parametrize(
    "build",
    [
        lambda: SloConfig(),
        lambda: SloConfig(ttft_ms=0.0),
        lambda: SloConfig(tbt_ms=float("inf")),
        lambda: ObservationWindow(1.0, 1.0),
    ],
)
def test_invalid_configs_raise(build) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        build()
