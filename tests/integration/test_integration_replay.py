"""Decision logs of gated runs with cancellations replay; tampering fails.

The header records the overload contract and the cost model; cancel lines
are re-applied at the state version they were made at; rejections are
re-derived by the gate and checked against the lines' ``rejected`` lists.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from integration_helpers import two_row_workload, write_workload

from iterserve.admission.overload import engine_gate, make_gate
from iterserve.cli.main import main
from iterserve.cost import FixedIterationCost
from iterserve.engine.decision_log import DecisionLogWriter, GateRecord
from iterserve.engine.loop import Engine, bind_policy
from iterserve.policies.deadline import bind_cost_model
from iterserve.policies.registry import make_policy
from iterserve.records.spec import HiddenTruth, WorkloadManifest
from iterserve.sim.replay import ReplayDivergence, replay
from iterserve.sim.report import costed_executor
from log_rows import as_columns, row_lines

COST = FixedIterationCost(10.0)


def _manifest() -> WorkloadManifest:
    base = two_row_workload((f"q{i:02d}", 10.0 * (i // 2)) for i in range(16))
    realized = {rid: 2 + i % 4 for i, rid in enumerate(base.hidden.realized_output_tokens)}
    return WorkloadManifest(base.online, HiddenTruth(realized))


def _run_logged(path: Path, policy_name: str = "least-slack", max_live: int = 3) -> Path:
    """A bounded run with two cancellations between iterations."""
    manifest = _manifest()
    gate = make_gate("bounded", {"max_live": max_live})
    policy = bind_cost_model(make_policy(policy_name), COST)
    executor = costed_executor(manifest, COST)
    with path.open("w") as stream:
        writer = DecisionLogWriter(stream, bind_policy(manifest.online, policy),
                                   executor.capacity(), cost_model=COST.spec,
                                   gate=GateRecord(gate.gate_id, gate.params()))
        engine = Engine(manifest.online, policy, executor, [writer], gate=engine_gate(gate))
        for step in range(40):
            if engine.is_done:
                break
            engine.step()
            live = engine.state.running + engine.state.waiting
            if step in (3, 8) and live:
                engine.cancel(live[-1])
        engine.run()
        writer.close(engine.state, is_done=engine.is_done)
    assert engine.rejected, "the fixture must reject"
    return path


def _lines(path: Path) -> list[dict]:
    return row_lines(path)  # one object per work item and completion, to read or edit


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(as_columns(line)) + "\n" for line in lines))
    return path


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> Path:
    return _run_logged(tmp_path_factory.mktemp("replay") / "log.jsonl")


@pytest.mark.parametrize("policy_name", ["least-slack", "edf", "refill"])
def test_gated_run_with_cancellations_replays(tmp_path, policy_name) -> None:
    path = _run_logged(tmp_path / "log.jsonl", policy_name)
    lines = _lines(path)
    assert lines[0]["gate"] == {"id": "bounded", "params": {"max_live": 3}}
    assert lines[0]["cost_model"] == "fixed:10"
    assert sum(line["type"] == "cancel" for line in lines) == 2
    assert any("rejected" in line for line in lines[1:])
    report = replay(path)
    assert report.num_iterations == sum(line["type"] == "iteration" for line in lines)


def _tamper_cancel_removed(lines: list[dict]) -> None:
    lines.remove(next(line for line in lines if line["type"] == "cancel"))


def _tamper_cancel_other_request(lines: list[dict]) -> None:
    cancel = next(line for line in lines if line["type"] == "cancel")
    others = {w["request_id"] for line in lines if line["type"] == "iteration"
              for w in line["plan"]["work"]} - {cancel["request_id"]}
    cancel["request_id"] = sorted(others)[-1]


def _tamper_cancel_moved(lines: list[dict]) -> None:
    index = next(i for i, line in enumerate(lines) if line["type"] == "cancel")
    lines[index], lines[index + 1] = lines[index + 1], lines[index]


def _tamper_rejection_reason(lines: list[dict]) -> None:
    next(line for line in lines[1:] if "rejected" in line)["rejected"][0][1] = "kv_capacity"


def _tamper_rejection_dropped(lines: list[dict]) -> None:
    del next(line for line in lines[1:] if "rejected" in line)["rejected"]


def _tamper_gate(lines: list[dict]) -> None:
    lines[0]["gate"]["params"]["max_live"] = 4


def _tamper_cost_model(lines: list[dict]) -> None:
    lines[0]["cost_model"] = "linear:0,10,1"


TAMPERS = {f.__name__.removeprefix("_tamper_"): f for f in (
    _tamper_cancel_removed, _tamper_cancel_other_request, _tamper_cancel_moved,
    _tamper_rejection_reason, _tamper_rejection_dropped, _tamper_gate, _tamper_cost_model)}


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_tampered_log_fails_replay(log, tmp_path, name) -> None:
    lines = _lines(log)
    TAMPERS[name](lines)
    with pytest.raises(ReplayDivergence, match=r"decision \d+|header"):
        replay(_write(tmp_path / "tampered.jsonl", lines))


def test_cli_gated_run_replays_and_stops_where_the_run_stopped(tmp_path, capsys) -> None:
    workload = write_workload(tmp_path / "w.json", _manifest())
    for extra in ([], ["--max-iterations", "5"]):
        out = tmp_path / f"out{len(extra)}"
        assert main(["simulate", "--workload", str(workload), "--policy", "least-slack",
                     "--cost-model", "fixed:10", "--overload", "bounded", "--max-live", "3",
                     "--out", str(out), "--decision-log", str(out / "log.jsonl"), "--no-plots",
                     *extra]) == 0
        assert main(["replay", str(out / "log.jsonl")]) == 0
    summary = _lines(tmp_path / "out2" / "log.jsonl")[-1]
    assert summary["type"] == "summary" and summary["is_done"] is False
    assert "replay ok: 5 iterations" in capsys.readouterr().out


def test_cli_rejects_a_tampered_gate_in_one_line(log, tmp_path, capsys) -> None:
    lines = _lines(log)
    lines[0]["gate"] = {"id": "no-such-gate", "params": {}}
    assert main(["replay", str(_write(tmp_path / "bad.jsonl", lines))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-such-gate" in err and "bounded" in err
