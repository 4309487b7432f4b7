"""The decision log written by a second process (issue 15): the same bytes
as the in-process writer; a failed or diverging log process is an error,
and a failed run leaves no child behind."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from lab_helpers import CHAT_MIX

from iterserve.admission.overload import make_gate
from iterserve.cost import parse_cost_model
from iterserve.engine.observer import EngineObserver
from iterserve.policies.registry import policy_for
from iterserve.records.spec import WorkloadManifest
from iterserve.sim import log_process, report
from iterserve.sim.generators import generate_workload
from iterserve.sim.log_process import LogProcessError, RunEnd
from iterserve.sim.report import RunConfig, run_simulation
from iterserve.sim.traces import trace_lengths
from iterserve.sim.workload_spec import parse_spec

MODEL = parse_cost_model("linear:8,0.02,0.1")


@pytest.fixture(autouse=True)
def two_cpus(monkeypatch) -> None:
    """The fork path whatever this machine's CPU count (it is correct on one
    CPU too, only not faster)."""
    monkeypatch.setattr(log_process, "usable_cpus", lambda: 2)


@pytest.fixture
def forks(monkeypatch) -> list[int]:
    """Counts the log processes started, so a test knows which path ran."""
    started: list[int] = []
    real = report.LogProcess

    def counted(write_log):
        started.append(1)
        return real(write_log)

    monkeypatch.setattr(report, "LogProcess", counted)
    return started


def _manifest(num_blocks: int, num_requests: int = 80) -> WorkloadManifest:
    raw = json.loads(CHAT_MIX.read_text())
    raw["kv"]["num_blocks"] = num_blocks
    raw["num_requests"] = num_requests
    return generate_workload(parse_spec(raw, lambda path, fmt, column: trace_lengths(
        CHAT_MIX.parent / path, fmt, column)))


def _config(manifest: WorkloadManifest, policy: str = "vllm", gate: str = "accept-all",
            max_iterations: int | None = None) -> RunConfig:
    params = {"max_live": 20} if gate == "bounded" else {}
    return RunConfig(policy_for(policy, manifest.online, cost_model=MODEL), MODEL,
                     make_gate(gate, params), max_iterations)


def _log(tmp_path: Path, name: str, manifest: WorkloadManifest, config: RunConfig,
         log_process: bool, **kwargs) -> bytes:
    path = tmp_path / name
    with path.open("w") as stream:
        run_simulation(manifest, config, stream, log_process=log_process, **kwargs)
    return path.read_bytes()


@pytest.mark.parametrize(("policy", "num_blocks", "gate", "max_iterations"), [
    ("vllm", 4000, "accept-all", None),
    ("vllm", 60, "accept-all", None),  # a small pool: preemptions and resumes
    ("sarathi-serve", 200, "bounded", None),  # rejections at arrival: rejected lists
    ("vllm", 4000, "accept-all", 40),  # stopped early: a summary line
])
def test_the_log_process_writes_the_in_process_bytes(tmp_path, forks, policy, num_blocks,
                                                      gate, max_iterations) -> None:
    manifest = _manifest(num_blocks)
    serial_events, forked_events = io.StringIO(), io.StringIO()
    serial = _log(tmp_path, "serial.jsonl", manifest,
                  _config(manifest, policy, gate, max_iterations), False, events=serial_events)
    assert not forks
    forked = _log(tmp_path, "forked.jsonl", manifest,
                  _config(manifest, policy, gate, max_iterations), True, events=forked_events)
    assert forks == [1]
    assert forked == serial
    assert len(serial.splitlines()) > 20
    # the parent's other records are the serial run's
    assert forked_events.getvalue() == serial_events.getvalue()
    assert '"kind": "arrival"' in forked_events.getvalue()


def test_a_stream_without_a_file_descriptor_is_written_in_process(forks) -> None:
    manifest = _manifest(4000, 20)
    serial, forked = io.StringIO(), io.StringIO()
    run_simulation(manifest, _config(manifest), serial)
    run_simulation(manifest, _config(manifest), forked, log_process=True)
    assert not forks
    assert forked.getvalue() == serial.getvalue()


def test_a_failed_log_process_is_an_error(tmp_path) -> None:
    manifest = _manifest(4000, 20)
    path = tmp_path / "read-only.jsonl"
    path.write_text("")
    with path.open("r") as stream, pytest.raises(LogProcessError, match="not writable"):
        run_simulation(manifest, _config(manifest), stream, log_process=True)  # type: ignore[arg-type]


def test_a_log_process_that_took_other_decisions_is_an_error(tmp_path, monkeypatch) -> None:
    manifest = _manifest(4000, 20)
    rerun = report._logged_rerun

    def stops_early(manifest, config, stream) -> RunEnd:
        return rerun(manifest, RunConfig(config.policy, config.cost_model, config.gate, 3),
                     stream)

    monkeypatch.setattr(report, "_logged_rerun", stops_early)
    with (tmp_path / "log.jsonl").open("w") as stream, \
            pytest.raises(LogProcessError, match="other decisions: it ended after 3 iterations"):
        run_simulation(manifest, _config(manifest), stream, log_process=True)


class _Fails(EngineObserver):
    def __init__(self) -> None:
        self.steps = 0

    def on_step(self, state, plan, result, successor) -> None:
        self.steps += 1
        if self.steps == 5:
            raise RuntimeError("observer failed")


def test_a_failed_run_stops_its_log_process(tmp_path, forks) -> None:
    manifest = _manifest(4000, 40)
    with (tmp_path / "log.jsonl").open("w") as stream, \
            pytest.raises(RuntimeError, match="observer failed"):
        run_simulation(manifest, _config(manifest), stream, [_Fails()], log_process=True)
    assert forks == [1]
    with pytest.raises(ChildProcessError):  # reaped: no child left behind
        os.waitpid(-1, os.WNOHANG)


def test_the_run_ends_are_compared_field_by_field() -> None:
    assert RunEnd(3, "ab") == RunEnd(3, "ab")
    assert RunEnd(3, "ab") != RunEnd(4, "ab")
    assert RunEnd(3, "ab") != RunEnd(3, "ac")


def test_the_log_process_exits_once_its_parent_is_gone(monkeypatch) -> None:
    """A parent killed outright cannot stop its log process: the child checks
    every few steps that its parent is still there."""
    exits: list[int] = []
    monkeypatch.setattr(log_process.os, "_exit", exits.append)
    watch = log_process.ParentWatch(every=4)
    for _ in range(8):
        watch.on_step(None, None, None, None)  # type: ignore[arg-type]
    assert exits == []  # the parent (this test's parent process) is still there
    monkeypatch.setattr(log_process.os, "getppid", lambda: 1)  # re-parented to init
    for _ in range(3):
        watch.on_step(None, None, None, None)  # type: ignore[arg-type]
    assert exits == []  # checked every 4th step only
    watch.on_step(None, None, None, None)  # type: ignore[arg-type]
    assert exits == [1]
