"""``iterserve simulate`` metric outputs, ``iterserve sweep``, and one-line
errors (exit 2) for bad flags."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from integration_helpers import BURST, write_workload

from iterserve.cli.main import main
from iterserve.metrics import read_jsonl


@pytest.fixture(scope="module")
def burst_file(tmp_path_factory) -> Path:
    return write_workload(tmp_path_factory.mktemp("cli") / "burst.json", BURST)


def _simulate(workload: Path, out: Path, *flags: str) -> int:
    return main(["simulate", "--workload", str(workload), "--policy", "least-slack",
                 "--cost-model", "fixed:10", "--out", str(out), *flags])


def test_simulate_writes_events_report_markdown_and_plots(burst_file, tmp_path) -> None:
    out = tmp_path / "out"
    assert _simulate(burst_file, out, "--overload", "bounded", "--max-live", "4",
                     "--window", "0", "0.1") == 0
    report = json.loads((out / "report.json").read_text())
    assert report["iterations"] == 4 and report["slot_occupancy"] == 1.0  # existing fields
    assert report["overload"] == {"contract": "bounded", "params": {"max_live": 4},
                                  "num_rejected": 2}
    assert report["cost_model"]["spec"] == "fixed:10"
    metrics = report["metrics"]
    assert metrics["slo"]["ttft_ms"] == 30.0 and metrics["window"]["end_s"] == 0.1
    assert metrics["outcomes"]["num_slo_valid"] == 4 and metrics["outcomes"]["num_rejected"] == 2
    assert metrics["rates"]["request_goodput_per_s"] == pytest.approx(40.0)
    assert len(read_jsonl(out / "events.jsonl")) > 0
    assert "offered-load attainment" in (out / "report.md").read_text()
    for name in ("latency_cdfs", "batch_composition", "queue_and_kv", "client_service"):
        assert (out / f"{name}.png").read_bytes().startswith(b"\x89PNG"), name


def test_flags_override_the_workload_slo_and_default_window(burst_file, tmp_path) -> None:
    out = tmp_path / "out"
    assert _simulate(burst_file, out, "--slo-ttft-ms", "50", "--slo-tbt-ms", "20",
                     "--no-plots") == 0
    assert not list(out.glob("*.png"))
    metrics = json.loads((out / "report.json").read_text())["metrics"]
    assert metrics["slo"]["ttft_ms"] == 50.0
    assert metrics["outcomes"]["num_slo_valid"] == 6  # E,F's 40 ms TTFT now meets 50 ms
    assert metrics["window"]["start_s"] == 0.0
    assert metrics["window"]["end_s"] == pytest.approx(0.06)  # just after the last event


def test_no_slo_means_no_metrics_section(tmp_path) -> None:
    raw = json.loads(write_workload(tmp_path / "w.json", BURST).read_text())
    for request in raw["requests"]:
        del request["slo"]
    (tmp_path / "w.json").write_text(json.dumps(raw))
    assert _simulate(tmp_path / "w.json", tmp_path / "out", "--no-plots") == 0
    assert "metrics" not in json.loads((tmp_path / "out" / "report.json").read_text())
    assert (tmp_path / "out" / "events.jsonl").exists()


BAD_FLAGS = {
    "unknown-overload": (["--overload", "drop-some"], "accept-all, bounded, slo-feasible"),
    "bounded-without-cap": (["--overload", "bounded"], "--max-live"),
    "cap-without-bounded": (["--max-live", "3"], "--max-live"),
    "zero-cap": (["--overload", "bounded", "--max-live", "0"], "max_live"),
    "unknown-cost-model": (["--cost-model", "cubic:1"], "fixed, linear"),
    "cost-model-params": (["--cost-model", "linear:1,2"], "base_ms"),
    "negative-slo": (["--slo-ttft-ms", "-5"], "ttft_ms"),
    "inverted-window": (["--window", "1", "0"], "--window"),
    "unknown-policy": (["--policy", "slackest"], "least-slack"),
}


@pytest.mark.parametrize("case", sorted(BAD_FLAGS))
def test_bad_flags_fail_in_one_line(burst_file, tmp_path, capsys, case) -> None:
    flags, needle = BAD_FLAGS[case]
    assert _simulate(burst_file, tmp_path / "out", *flags) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and needle in err, err


def test_row_dependent_cost_is_refused_on_the_iteration_clock(tmp_path, capsys) -> None:
    raw = json.loads(write_workload(tmp_path / "w.json", BURST).read_text())
    raw["clock"] = "iteration"
    (tmp_path / "w.json").write_text(json.dumps(raw))
    assert main(["simulate", "--workload", str(tmp_path / "w.json"), "--policy", "edf",
                 "--cost-model", "linear:1,1,1", "--out", str(tmp_path / "out")]) == 2
    assert "iteration clock needs a fixed cost model" in capsys.readouterr().err


def _trial_attainment(burst_file: Path, tmp_path: Path, rate: float, trial_seed: str) -> float:
    """Offered-load attainment of one sweep trial rebuilt by hand: Poisson
    arrivals (unit-rate exponential gaps from random.Random(trial_seed), over
    the rate, in ms), run through ``iterserve simulate``."""
    rng, now_s = random.Random(trial_seed), 0.0
    document = json.loads(burst_file.read_text())
    for spec in document["requests"]:
        now_s += rng.expovariate(rate)
        spec["arrival"] = now_s * 1000.0
    path = tmp_path / f"trial-{rate:g}-{trial_seed.replace('/', '-')}.json"
    path.write_text(json.dumps(document))
    out = tmp_path / f"sim-{path.stem}"
    assert main(["simulate", "--workload", str(path), "--policy", "edf", "--cost-model",
                 "fixed:10", "--out", str(out), "--no-plots"]) == 0
    return json.loads((out / "report.json").read_text())["metrics"]["attainment"]["offered_load"]


def _sweep(burst_file: Path, out: Path, alpha: float, workers: str) -> dict:
    assert main(["sweep", "--workload", str(burst_file), "--policy", "edf", "--rates", "110",
                 "130", "150", "--trials", "2", "--seed", "7", "--alpha", repr(alpha),
                 "--cost-model", "fixed:10", "--workers", workers, "--out", str(out)]) == 0
    return json.loads((out / "sweep.json").read_text())


def test_sweep_smoke(burst_file, tmp_path, capsys) -> None:
    """Trials are averaged and capacity is the highest rate whose mean reaches
    alpha (>=): at seed 7 the two trials at 130 req/s attain 1 and 5/6 of the
    six requests (mean 11/12), at 150 req/s 1 and 4/6 (mean 5/6)."""
    trials = {rate: [_trial_attainment(burst_file, tmp_path, rate, f"7/{t}") for t in (0, 1)]
              for rate in (110.0, 130.0, 150.0)}
    assert trials == {110.0: [1.0, 1.0], 130.0: [1.0, 5 / 6], 150.0: [1.0, 4 / 6]}
    at_130 = (1.0 + 5 / 6) / 2  # exactly the mean the sweep must compute
    sweep = _sweep(burst_file, tmp_path / "boundary", at_130, "2")
    assert sweep["trial_seeds"] == ["7/0", "7/1"] and sweep["trials"] == 2
    rates = sweep["policies"]["edf"]["rates"]
    assert [e["rate_per_s"] for e in rates] == [110.0, 130.0, 150.0]
    assert [e["offered_load_attainment"] for e in rates] == list(trials.values())
    assert [e["mean_offered_load_attainment"] for e in rates] == [1.0, at_130, (1.0 + 4 / 6) / 2]
    assert [e["meets_alpha"] for e in rates] == [True, True, False]  # a mean equal to alpha meets it
    assert sweep["policies"]["edf"]["capacity_rate_per_s"] == 130.0
    assert "goodput capacity 130.0 req/s" in capsys.readouterr().out
    assert (tmp_path / "boundary" / "attainment_vs_rate.png").read_bytes().startswith(b"\x89PNG")
    above = _sweep(burst_file, tmp_path / "above", math.nextafter(at_130, 1.0), "1")
    assert [e["meets_alpha"] for e in above["policies"]["edf"]["rates"]] == [True, False, False]
    assert above["policies"]["edf"]["capacity_rate_per_s"] == 110.0


def test_sweep_is_the_same_on_one_process(burst_file, tmp_path) -> None:
    runs = []
    for workers in ("1", "2"):
        out = tmp_path / workers
        assert main(["sweep", "--workload", str(burst_file), "--policy", "least-slack",
                     "--rates", "100", "--trials", "2", "--cost-model", "fixed:10",
                     "--workers", workers, "--out", str(out)]) == 0
        runs.append(json.loads((out / "sweep.json").read_text())["policies"])
    assert runs[0] == runs[1]


def test_sweep_needs_an_slo(tmp_path, capsys) -> None:
    raw = json.loads(write_workload(tmp_path / "w.json", BURST).read_text())
    for request in raw["requests"]:
        del request["slo"]
    (tmp_path / "w.json").write_text(json.dumps(raw))
    assert main(["sweep", "--workload", str(tmp_path / "w.json"), "--policy", "edf",
                 "--rates", "1", "--out", str(tmp_path / "out")]) == 2
    assert "sweep needs an SLO" in capsys.readouterr().err
