"""report.md rendering and PNG plots from the real code path."""

import json
from collections import Counter
from pathlib import Path

import pytest
from metrics_fixtures import (
    BURST_SLO,
    burst_accept_all,
    burst_four_live_cap,
    least_slack_tick_oracle,
    merged,
    saturation_arrivals,
    stream,
)

from iterserve.metrics import (
    EventLog,
    IterationComposition,
    ObservationWindow,
    ResourceSample,
    ServiceWeights,
    evaluate,
    render_markdown,
    slot_occupancy,
)
from iterserve.metrics.plots import (
    plot_attainment_vs_rate,
    plot_batch_composition,
    plot_client_service,
    plot_latency_cdfs,
    plot_queue_and_kv,
)
from iterserve.metrics.series import queue_depth_from_events

WINDOW = ObservationWindow(0.0, 0.1)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_hand_built_logs_follow_the_least_slack_rules() -> None:
    """A self-check of the fixtures these rendering tests draw (moved from the
    deleted test_metrics_burst.py, whose scores tests/integration/
    test_integration_burst.py now checks on the real simulator's logs)."""
    burst = [(request_id, 0) for request_id in "ABCDEF"]
    assert Counter(least_slack_tick_oracle(burst, max_live=None)) == Counter(burst_accept_all())
    assert Counter(least_slack_tick_oracle(burst, max_live=4)) == Counter(burst_four_live_cap())


@pytest.fixture
def reports():  # type: ignore[no-untyped-def]
    return [
        evaluate(burst_accept_all(), BURST_SLO, WINDOW, label="accept-all"),
        evaluate(burst_four_live_cap(), BURST_SLO, WINDOW, label="four-live-cap"),
    ]


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert len(data) > 1000 and data.startswith(PNG_MAGIC)


def test_report_dict_is_json_and_names_units(reports) -> None:  # type: ignore[no-untyped-def]
    record = json.loads(json.dumps(reports[0].to_dict(include_samples=True), allow_nan=False))
    assert record["schema"] == "iterserve.metrics.report/v1"
    assert set(record["rates"]) >= {"request_goodput_per_s", "slo_valid_token_goodput_per_s"}
    assert record["latency_ms"]["ttft"]["p99"] == {"status": "insufficient_sample", "n": 6}
    assert record["samples_ms"]["tbt"] == pytest.approx([10, 10, 20, 20, 20, 20])


def test_markdown_puts_offered_load_beside_conditional_rates(reports) -> None:  # type: ignore[no-untyped-def]
    iterations = [IterationComposition(i / 100, 2, 0) for i in range(6)]
    text = render_markdown(reports, occupancy={"accept-all": slot_occupancy(iterations, 2)})
    assert "| metric | accept-all | four-live-cap |" in text
    assert "| of all arrivals (offered-load attainment, N_valid/N_off) | 66.667% | 66.667% |" in text
    assert "(completion-conditioned, diagnostic" in text
    assert "| requests within their targets per second (request goodput, req/s) | 40 | 40 |" in text
    assert "n=6<20" in text  # withheld p95, never a number
    assert "not measured GPU utilization" in text


def test_plots_are_written(tmp_path: Path, reports) -> None:  # type: ignore[no-untyped-def]
    saturation = least_slack_tick_oracle(saturation_arrivals(), max_live=4)
    depth = queue_depth_from_events(saturation)
    samples = [
        ResourceSample(
            time_s,
            num_waiting=waiting,
            num_running=min(4, i),
            num_kv_blocks_used=min(i, 16),
            num_kv_blocks_total=16,
        )
        for i, (time_s, waiting) in enumerate(depth)
    ]
    iterations = [_composition(i) for i in range(40)]
    sweep = {
        "accept-all": [
            evaluate(
                least_slack_tick_oracle(saturation_arrivals()[:n], max_live=None),
                BURST_SLO,
                ObservationWindow(0, 1.3),
            )
            for n in (40, 120, 240)
        ],
        "four-live-cap": [
            evaluate(
                least_slack_tick_oracle(saturation_arrivals()[:n], max_live=4),
                BURST_SLO,
                ObservationWindow(0, 1.3),
            )
            for n in (40, 120, 240)
        ],
    }
    paths = [
        plot_latency_cdfs(reports, tmp_path / "cdf.png"),
        plot_batch_composition(iterations, tmp_path / "batch.png", max_rows_per_iteration=2),
        plot_queue_and_kv(samples, tmp_path / "queue_kv.png"),
        plot_client_service(_two_clients(), tmp_path / "service.png", weights=ServiceWeights(1, 2)),
        plot_attainment_vs_rate(sweep, tmp_path / "attainment.png"),
    ]
    for path in paths:
        _assert_png(path)


def _two_clients() -> EventLog:
    """Client a: eight short requests served first; client b: four, served after."""
    groups = [stream(f"a{i}", 0.0, [(i + 1) / 100], client_id="a") for i in range(8)]
    groups += [stream(f"b{i}", 0.0, [(i + 9) / 100], client_id="b") for i in range(4)]
    return merged(*groups)


def _composition(index: int) -> IterationComposition:
    """Every 3rd iteration piggybacks a prefill row, every 10th rebuilds one."""
    prefill = 1 if index % 3 == 0 else 0
    rebuild = 1 if index % 10 == 9 else 0
    return IterationComposition(index / 100, prefill, 2 - prefill - rebuild, rebuild)


def test_queue_depth_from_events() -> None:
    depth = dict(queue_depth_from_events(burst_accept_all()))
    assert depth[0.0] == 0  # all six admitted at arrival
