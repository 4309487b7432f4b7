"""``iterserve simulate --layer-offload`` (0x09B, F64): layer-readiness
stalls on the run's clock, report.json ``layer_offload``, report.md's
section, the decision log header and replay.

The hand-worked run: one request (prompt 1, three outputs: three
iterations) at ``fixed:4`` on the ms clock, ``--layer-offload 2,1,3``. Each
iteration's 4 ms of compute is 2 ms per layer. Layer 0 is resident: it
runs over [t, t+2]. Layer 1's transfer is issued when layer 0 starts and
lands at t+3 (its deadline, the planned start, is t+2): it starts at t+3,
1 ms late, a 1 ms stall, and ends at t+5. Every iteration lasts 5 ms
instead of 4: three delayed, 3 ms of stall in all; the first token comes
at 5 ms (4 ms without offload), the last at 15 ms (12)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iterserve.cli.main import main
from iterserve.sim import follower, report
from log_rows import rechained

ONE_REQUEST = {
    "workload_id": "layers", "clock": "ms",
    "capacity": {"max_num_batched_tokens": 4, "max_num_seqs": 1},
    "requests": [{"request_id": "r", "arrival": 0, "prompt_tokens": 1, "max_output_tokens": 3}],
}


def _simulate(tmp: Path, workload: Path, name: str, *extra: str) -> dict:
    out = tmp / name
    assert main(["simulate", "--workload", str(workload), "--policy", "refill",
                 "--cost-model", "fixed:4", "--out", str(out), "--no-plots",
                 "--decision-log", str(tmp / f"{name}.jsonl"), *extra]) == 0
    return json.loads((out / "report.json").read_text())


@pytest.fixture
def one_request(tmp_path) -> Path:
    path = tmp_path / "one.json"
    path.write_text(json.dumps(ONE_REQUEST))
    return path


def test_the_hand_worked_run_stalls_each_iteration_by_one_ms(tmp_path, one_request) -> None:
    on = _simulate(tmp_path, one_request, "on", "--layer-offload", "2,1,3",
                   "--log-process", "off")
    off = _simulate(tmp_path, one_request, "off", "--log-process", "off")
    section = on["layer_offload"]
    assert section["settings"] == {"num_layers": 2, "num_offloaded": 1, "transfer_ms": 3.0}
    assert (section["num_iterations"], section["num_iterations_delayed"]) == (3, 3)
    assert section["total_stall_ms"] == pytest.approx(3.0)
    resident, fetched = section["layers"]
    assert not resident["offloaded"] and resident["lateness_ms"]["max"] == 0
    assert fetched["offloaded"]
    assert fetched["lateness_ms"]["max"] == pytest.approx(1.0)
    assert fetched["lateness_ms"]["p50"]["value"] == pytest.approx(1.0)
    assert section["transfer_overlap_fraction"] == pytest.approx(2 / 3)  # [0,3] vs layer 0's [0,2]
    latency_on, latency_off = on["summary"]["latency_ms"], off["summary"]["latency_ms"]
    assert latency_on["ttft"]["mean"] == pytest.approx(5.0)
    assert latency_off["ttft"]["mean"] == pytest.approx(4.0)
    assert latency_on["end_to_end"]["mean"] == pytest.approx(15.0)
    assert latency_off["end_to_end"]["mean"] == pytest.approx(12.0)
    assert "layer offload 1 of 2 layers" in on["coordinates"]["hardware"]
    text = (tmp_path / "on" / "report.md").read_text()
    assert "## Layer offload (simulated, 0x09B)" in text
    assert "3 of 3 iterations delayed" in text and "not measured GPU/host transfers" in text
    assert "| 1 | 1 | 1 |" in text


def test_off_leaves_the_report_and_the_header_without_offload(tmp_path, one_request) -> None:
    off = _simulate(tmp_path, one_request, "off", "--log-process", "off")
    assert "layer_offload" not in off
    assert "Layer offload" not in (tmp_path / "off" / "report.md").read_text()
    header = json.loads((tmp_path / "off.jsonl").read_text().splitlines()[0])
    assert "layer_offload" not in header


def test_the_follower_process_sees_the_same_clock(tmp_path, one_request, monkeypatch) -> None:
    """The follower writes the decision log from the run's results: the same
    bytes, the same report, as the one-process run."""
    monkeypatch.setattr(follower, "usable_cpus", lambda: 2)
    started: list[int] = []
    real = report.FollowerProcess
    monkeypatch.setattr(report, "FollowerProcess",
                        lambda follow: started.append(1) or real(follow))
    alone = _simulate(tmp_path, one_request, "alone", "--layer-offload", "2,1,3",
                      "--log-process", "off")
    assert not started
    followed = _simulate(tmp_path, one_request, "followed", "--layer-offload", "2,1,3",
                         "--log-process", "auto")
    assert started
    assert followed == alone
    assert (tmp_path / "followed.jsonl").read_bytes() == (tmp_path / "alone.jsonl").read_bytes()
    header = json.loads((tmp_path / "followed.jsonl").read_text().splitlines()[0])
    assert header["layer_offload"] == {"num_layers": 2, "num_offloaded": 1, "transfer_ms": 3.0}


def test_the_offload_runs_log_replays(tmp_path, one_request, capsys) -> None:
    _simulate(tmp_path, one_request, "on", "--layer-offload", "2,1,3")
    log = str(tmp_path / "on.jsonl")
    assert main(["replay", log]) == 0
    assert main(["replay", log, "--workload", str(one_request)]) == 0
    assert "durations re-derived" in capsys.readouterr().out


def test_replay_without_the_header_field_would_not_reproduce_the_clock(tmp_path,
                                                                       one_request) -> None:
    """The header field is what replay needs: the same log re-chained
    without it re-derives 4 ms iterations, not the logged 5 ms."""
    _simulate(tmp_path, one_request, "on", "--layer-offload", "2,1,3")
    lines = [json.loads(text) for text in (tmp_path / "on.jsonl").read_text().splitlines()]
    del lines[0]["layer_offload"]
    stripped = tmp_path / "stripped.jsonl"
    stripped.write_text(rechained(lines))
    assert main(["replay", str(stripped)]) == 0  # plans follow the logged results
    assert main(["replay", str(stripped), "--workload", str(one_request)]) == 2


def test_offload_raises_ttft_on_a_generated_workload(tmp_path) -> None:
    spec = {"workload_id": "offload-mix", "seed": 5, "num_requests": 24, "clock": "ms",
            "capacity": {"max_num_batched_tokens": 256, "max_num_seqs": 8},
            "arrival": {"process": "poisson", "rate_per_s": 200.0},
            "clients": [{"client_id": "c",
                         "prompt_tokens": {"kind": "uniform", "min": 8, "max": 64},
                         "output_tokens": {"kind": "uniform", "min": 2, "max": 8}}]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    workload = tmp_path / "workload.json"
    assert main(["workload", "gen", str(tmp_path / "spec.json"), "-o", str(workload)]) == 0
    off = _simulate(tmp_path, workload, "off")
    on = _simulate(tmp_path, workload, "on", "--layer-offload", "8,4,1.5")
    assert on["layer_offload"]["num_iterations_delayed"] > 0
    assert on["summary"]["latency_ms"]["ttft"]["mean"] > off["summary"]["latency_ms"]["ttft"]["mean"]
    assert on["iterations"] == on["layer_offload"]["num_iterations"]
