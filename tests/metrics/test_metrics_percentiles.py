"""0x07 "Tail Metrics Need A Sample Contract": nearest rank and sample gates."""

import pytest

from iterserve.metrics.percentiles import gated_percentile, min_sample_size, nearest_rank, summarize


def test_tail_probe_mean_passes_p95_passes_p99_fails() -> None:
    samples_ms = [10.0] * 98 + [500.0] * 2
    summary = summarize(samples_ms).to_dict()
    assert summary["mean"] == pytest.approx(19.8)
    assert summary["p95"] == {"status": "ok", "n": 100, "value": 10.0}
    assert summary["p99"] == {"status": "ok", "n": 100, "value": 500.0}
    assert summary["p50"]["value"] == 10.0


def test_twelve_samples_withhold_p95_and_p99() -> None:
    summary = summarize([float(value) for value in range(12)]).to_dict()
    assert summary["p95"] == {"status": "insufficient_sample", "n": 12}
    assert summary["p99"] == {"status": "insufficient_sample", "n": 12}
    assert summary["p50"]["status"] == "ok"
    assert summary["mean"] == pytest.approx(5.5)


@pytest.mark.parametrize(("percent", "gate"), [(50, 2), (95, 20), (99, 100), (99.9, 1000)])
def test_gates(percent: float, gate: int) -> None:
    assert min_sample_size(percent) == gate
    assert gated_percentile([1.0] * (gate - 1), percent).status == "insufficient_sample"
    assert gated_percentile([1.0] * gate, percent).status == "ok"


def test_nearest_rank_uses_exact_ranks() -> None:
    twenty = [float(value) for value in range(1, 21)]
    assert nearest_rank(twenty, 95) == 19.0  # ceil(0.95 * 20) = 19 exactly
    assert nearest_rank(twenty, 50) == 10.0
    assert nearest_rank([3.0, 7.0], 50) == 3.0


def test_single_sample_reports_mean_only() -> None:
    summary = summarize([42.0]).to_dict(scale=1000.0)
    assert summary["mean"] == 42000.0
    assert summary["p50"] == {"status": "insufficient_sample", "n": 1}


def test_empty_sample_has_no_mean() -> None:
    assert summarize([]).to_dict()["mean"] is None


@pytest.mark.parametrize("percent", [0, 100, -5, 150])
def test_percent_out_of_range_raises(percent: float) -> None:
    with pytest.raises(ValueError):
        min_sample_size(percent)
