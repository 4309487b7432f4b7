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
