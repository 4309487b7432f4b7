"""Every 0x09A policy runs every example workload to the end (the shared
preemption step under the small KV pool: no stall) and replays bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest

from iterserve.cli.main import main

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.json"))
FAIR_POLICIES = ["least-service", "vtc", "vtc-completed", "priority", "priority-aging", "mlfq",
                 "prefix-quota", "prefix-greedy"]


@pytest.mark.parametrize("policy", FAIR_POLICIES)
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.stem)
def test_runs_to_the_end_and_replays(tmp_path, capsys, policy, example) -> None:
    log = tmp_path / "log.jsonl"
    assert main(["simulate", "--workload", str(example), "--policy", policy, "--out",
                 str(tmp_path / "out"), "--no-plots", "--decision-log", str(log)]) == 0
    assert main(["replay", str(log)]) == 0
    assert "replay ok" in capsys.readouterr().out


@pytest.mark.parametrize("policy", FAIR_POLICIES)
def test_a_pool_smaller_than_one_request_ends_by_preempting_and_aborting(tmp_path, policy) -> None:
    # declared running_set PREEMPTS: they finish on any pool (plan/feasibility.py)
    import json

    requests = [{"request_id": f"r{i}", "arrival": i, "prompt_tokens": 6,
                 "max_output_tokens": 10, "client_id": "AB"[i % 2]} for i in range(4)]
    spec = {"workload_id": "tiny-pool", "clock": "iteration",
            "capacity": {"max_num_batched_tokens": 8, "max_num_seqs": 2}, "requests": requests,
            "kv": {"num_kv_blocks": 3, "block_size": 4}}
    path, log = tmp_path / "w.json", tmp_path / "log.jsonl"
    path.write_text(json.dumps(spec))
    assert main(["simulate", "--workload", str(path), "--policy", policy, "--out",
                 str(tmp_path / "out"), "--no-plots", "--decision-log", str(log)]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {r["finish_reason"] for r in report["requests"].values()} <= {"abort", "length"}
    assert main(["replay", str(log)]) == 0
