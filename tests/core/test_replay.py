"""Decision logs and ``iterserve replay`` (DESIGN rule 6): every registered
policy's log replays bit for bit, a one-field edit is caught and named, and
the log bytes do not depend on the run or on PYTHONHASHSEED."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from iterserve.cli.main import main
from iterserve.engine.decision_log import DecisionLogWriter
from iterserve.engine.loop import Engine, bind_policy
from iterserve.policies.registry import make_policy, policy_names
from iterserve.records.workload import load_workload
from iterserve.sim.factory import make_simulated_executor
from log_rows import as_columns, row_lines

from .helpers import REPO_ROOT, random_workload_json, write_json

CLI = Path(sys.executable).with_name("iterserve")


@pytest.fixture(scope="module")
def workload_path(tmp_path_factory) -> Path:
    return write_json(tmp_path_factory.mktemp("replay") / "workload.json",
                      random_workload_json(seed=2024, num_requests=12))


def _simulate(workload: Path, policy_name: str, out: Path) -> Path:
    log = out / "decisions.jsonl"
    rc = main(["simulate", "--no-plots", "--workload", str(workload), "--policy", policy_name,
               "--out", str(out), "--decision-log", str(log)])
    assert rc == 0
    return log


@pytest.fixture(scope="module")
def logs(workload_path, tmp_path_factory) -> dict[str, Path]:
    return {name: _simulate(workload_path, name, tmp_path_factory.mktemp(name))
            for name in policy_names()}


def _lines(log: Path) -> list[dict]:
    """The log's lines, iteration lines with one object per work item and
    completion (:func:`log_rows.as_rows`), for a test to read or edit."""
    return row_lines(log)


def _write_lines(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(as_columns(line), sort_keys=True) + "\n"
                            for line in lines))
    return path


@pytest.mark.parametrize("policy_name", policy_names())
def test_log_replays_bit_for_bit(logs, policy_name, capsys):
    log = logs[policy_name]
    lines = _lines(log)
    assert lines[0]["type"] == "header"
    assert lines[0]["policy"]["id"] == policy_name
    assert len(lines) > 5, "the workload must make a non-trivial log"
    assert "realized_output_tokens" not in log.read_text()
    assert main(["replay", str(log)]) == 0
    assert f"{len(lines) - 1} iterations" in capsys.readouterr().out


def _pick_iteration(lines: list[dict]) -> int:
    """A line in the middle whose plan has work (every logged line does)."""
    index = len(lines) // 2
    assert lines[index]["type"] == "iteration" and lines[index]["plan"]["work"]
    return index


EDITS = {
    "interval-end": lambda plan: plan["work"][-1].__setitem__("end", plan["work"][-1]["end"] + 1),
    "tie-break": lambda plan: plan["work"][0]["tie_break"].__setitem__(
        0, plan["work"][0]["tie_break"][0] + 1),
    "snapshot": lambda plan: plan["work"][0].__setitem__(
        "snapshot_version", plan["work"][0]["snapshot_version"] + 1),
    "tokens-used": lambda plan: plan.__setitem__("tokens_used", plan["tokens_used"] - 1),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
@pytest.mark.parametrize("policy_name", policy_names())
def test_one_edited_plan_field_fails_replay_naming_the_decision(
        logs, policy_name, edit, tmp_path, capsys):
    lines = _lines(logs[policy_name])
    index = _pick_iteration(lines)
    decision = lines[index]["decision_id"]
    EDITS[edit](lines[index]["plan"])
    edited = _write_lines(tmp_path / "edited.jsonl", lines)
    capsys.readouterr()
    assert main(["replay", str(edited)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"decision {decision}:" in err and "plan" in err


def test_edited_result_diverges_at_the_next_state(logs, tmp_path, capsys):
    """A forged fact changes the replayed successor: the next digest catches it."""
    lines = _lines(logs["refill"])
    index = _pick_iteration(lines)
    completion = next(c for c in lines[index]["result"]["completed"] if c["emitted"])
    completion["finish_reason"] = "stop" if completion["finish_reason"] is None else None
    edited = _write_lines(tmp_path / "edited.jsonl", lines)
    capsys.readouterr()
    assert main(["replay", str(edited)]) == 2
    assert "decision" in capsys.readouterr().err


def test_truncated_log_fails_replay(logs, tmp_path, capsys):
    lines = _lines(logs["refill"])
    truncated = _write_lines(tmp_path / "truncated.jsonl", lines[:-1])
    assert main(["replay", str(truncated)]) == 2
    assert f"decision {lines[-1]['decision_id']}" in capsys.readouterr().err


def test_log_is_byte_identical_across_runs(workload_path, logs, tmp_path):
    for name in policy_names():
        again = _simulate(workload_path, name, tmp_path / name)
        assert again.read_bytes() == logs[name].read_bytes(), name


@pytest.mark.parametrize("policy_name", ["decode-first"])
def test_log_is_byte_identical_across_hash_seeds(workload_path, policy_name, tmp_path):
    """The installed console script; all policies are covered in-process below."""
    assert CLI.exists(), CLI
    outputs = []
    for seed in ("0", "12345"):
        out = tmp_path / seed
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [str(CLI), "simulate", "--no-plots", "--workload", str(workload_path),
             "--policy", policy_name, "--out", str(out), "--decision-log", str(out / "log.jsonl")],
            env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        outputs.append(((out / "log.jsonl").read_bytes(), (out / "report.json").read_bytes()))
    assert outputs[0] == outputs[1]


def test_every_policy_log_is_byte_identical_across_hash_seeds(logs, workload_path, tmp_path):
    """All registered policies in one interpreter under another hash seed,
    against the logs this (randomly seeded) pytest process wrote."""
    seed = "0" if os.environ.get("PYTHONHASHSEED") != "0" else "1"
    script = (
        "import sys; from iterserve.cli.main import main; "
        "from iterserve.policies.registry import policy_names\n"
        "for name in policy_names():\n"
        "    out = sys.argv[2] + '/' + name\n"
        "    assert main(['simulate', '--no-plots', '--workload', sys.argv[1], '--policy', name, "
        "'--out', out, '--decision-log', out + '/decisions.jsonl']) == 0\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(workload_path), str(tmp_path)],
        env={**os.environ, "PYTHONHASHSEED": seed}, cwd=REPO_ROOT,
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    for name in policy_names():
        assert (tmp_path / name / "decisions.jsonl").read_bytes() == logs[name].read_bytes(), name


# --- memory pressure: preemption and rebuild replay too ------------------------------
PREEMPTING = ["vllm", "vllm-priority", "sarathi-serve"]


@pytest.fixture(scope="module")
def kv_workload_path(tmp_path_factory) -> Path:
    workload = random_workload_json(seed=2024, num_requests=12)
    workload["capacity"]["kv_rows"] = 20  # tight: forces recompute preemption
    return write_json(tmp_path_factory.mktemp("kv") / "workload.json", workload)


@pytest.mark.parametrize("policy_name", PREEMPTING)
def test_preempting_run_replays(kv_workload_path, policy_name, tmp_path, capsys):
    log = _simulate(kv_workload_path, policy_name, tmp_path)
    text = log.read_text()
    assert '"preempt_recompute"' in text and '"REBUILD"' in text
    assert main(["replay", str(log)]) == 0
    again = _simulate(kv_workload_path, policy_name, tmp_path / "again")
    assert again.read_bytes() == log.read_bytes()


# --- forged results and cancellations ------------------------------------------------
@pytest.mark.parametrize("forgery", ["emitted", "service", "generation"])
def test_forged_logged_result_fails_replay_naming_the_decision(logs, forgery, tmp_path, capsys):
    """A logged result that fails validate_result is a divergence at its decision."""
    lines = _lines(logs["refill"])
    index = _pick_iteration(lines)
    decision = lines[index]["decision_id"]
    result = lines[index]["result"]
    completion = next(c for c in result["completed"] if c["emitted"])
    if forgery == "emitted":
        completion["emitted"] = False
    elif forgery == "service":
        client = next(iter(result["service"]))
        result["service"][client] += 5
    else:
        completion["generation"] += 7
    edited = _write_lines(tmp_path / "edited.jsonl", lines)
    capsys.readouterr()
    assert main(["replay", str(edited)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"decision {decision}" in err, err


def test_run_with_a_cancel_replays(workload_path, tmp_path, capsys):
    """Engine.cancel() is logged and replayed at the state version it happened at."""
    manifest = load_workload(workload_path)
    policy = make_policy("refill")
    executor = make_simulated_executor(manifest)
    log = tmp_path / "decisions.jsonl"
    with log.open("w") as stream:
        writer = DecisionLogWriter(stream, bind_policy(manifest.online, policy),
                                   executor.capacity())
        engine = Engine(manifest.online, policy, executor, [writer])
        while not engine.state.running:
            engine.step()
        engine.step()
        engine.cancel(engine.state.running[0])
        engine.run()
    capsys.readouterr()
    rc = main(["replay", str(log)])
    assert rc == 0, capsys.readouterr().err
    # the cancel is a fact of the log: without its line the replay diverges
    lines = _lines(log)
    assert [line["type"] for line in lines].count("cancel") == 1
    dropped = _write_lines(tmp_path / "dropped.jsonl",
                           [line for line in lines if line["type"] != "cancel"])
    assert main(["replay", str(dropped)]) == 2
    assert "decision" in capsys.readouterr().err
