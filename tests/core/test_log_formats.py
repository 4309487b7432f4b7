"""Decision-log formats 4 to 6 (issue 15): their state digest is a function
of the state alone (not of the views mapping's order, nor of which view
objects carry the values) that tells states apart, and replay checks every
log with its own format's digest: a format-3 log (the whole-text digest)
still replays, and a digest of the other format is a divergence. Format 5
writes an iteration's work and completions as columns, format 6 as tables;
the same log with one object per item (format 4) or one array per field
(format 5) replays too."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from iterserve.cli.main import main
from iterserve.engine.decision_log import STATE_DIGESTS
from iterserve.engine.log_reader import read_log
from iterserve.records.codec import (
    COMPLETED_COLUMNS,
    WORK_COLUMNS,
    state_text_digest,
)
from iterserve.records.state import SchedulerState
from iterserve.records.state_digest import state_digest
from iterserve.records.view import Lifecycle
from iterserve.sim.replay import _Replay
from log_rows import as_columns, as_rows, rechained

from .helpers import Recorder, random_workload_json, write_json


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path]:
    """A simulated run's workload file and its (format 4) decision log."""
    out = tmp_path_factory.mktemp("format4")
    workload = random_workload_json(seed=7, num_requests=14)
    workload["clock"] = "ms"
    workload["kv"] = {"num_kv_blocks": 10, "block_size": 2}  # preemptions: views change queues
    path = write_json(out / "workload.json", workload)
    log = out / "decisions.jsonl"
    assert main(["simulate", "--no-plots", "--workload", str(path), "--policy", "vllm",
                 "--cost-model", "linear:5,0.5,0.25", "--out", str(out / "run"),
                 "--decision-log", str(log)]) == 0
    return path, log


def _replayed_states(log: Path) -> list[SchedulerState]:
    run = _Replay(read_log(log), None)
    recorder = Recorder()
    run.engine.observers.append(recorder)
    run.run()
    return [state for state, _, _, _ in recorder.steps]


def _rewritten(log: Path, out: Path, log_format: int, digests: list[str]) -> Path:
    """``log`` with header ``format`` and these iteration digests, chained
    again; below format 5 the work and the completions as row objects, in
    format 5 as arrays (format 6: tables)."""
    lines = [json.loads(text) for text in log.read_text().splitlines()]
    lines[0]["format"] = log_format
    iterations = [line for line in lines if line["type"] == "iteration"]
    assert len(iterations) == len(digests)
    for line, digest in zip(iterations, digests, strict=True):
        line["state_digest"] = digest
        if log_format < 6:
            as_rows(line)
        if log_format == 5:
            as_columns(line, tables=False)
    out.write_text(rechained(lines))
    return out


def test_the_log_is_format_6_and_each_format_has_its_digest(run) -> None:
    _, log = run
    assert json.loads(log.read_text().splitlines()[0])["format"] == 6
    assert STATE_DIGESTS[6] is STATE_DIGESTS[5] is STATE_DIGESTS[4] is state_digest
    assert all(STATE_DIGESTS[f] is state_text_digest for f in (1, 2, 3))


def test_a_format_4_log_replays_with_one_object_per_item(run, tmp_path, capsys) -> None:
    workload, log = run
    states = _replayed_states(log)
    old = _rewritten(log, tmp_path / "format4.jsonl", 4, [state_digest(s) for s in states])
    assert '"work":[{' in old.read_text()
    capsys.readouterr()
    assert main(["replay", str(old)]) == 0, capsys.readouterr().err
    assert main(["replay", str(old), "--workload", str(workload)]) == 0, capsys.readouterr().err


def test_a_format_5_log_replays_with_one_array_per_field(run, tmp_path, capsys) -> None:
    workload, log = run
    states = _replayed_states(log)
    old = _rewritten(log, tmp_path / "format5.jsonl", 5, [state_digest(s) for s in states])
    first = next(json.loads(text) for text in old.read_text().splitlines()
                 if '"type":"iteration"' in text)
    assert set(first["plan"]["work"]) == set(WORK_COLUMNS)  # arrays, no table
    assert set(first["result"]["completed"]) == set(COMPLETED_COLUMNS)
    capsys.readouterr()
    assert main(["replay", str(old)]) == 0, capsys.readouterr().err
    assert main(["replay", str(old), "--workload", str(workload)]) == 0, capsys.readouterr().err


def test_a_format_3_log_replays_with_the_whole_text_digest(run, tmp_path, capsys) -> None:
    workload, log = run
    states = _replayed_states(log)
    assert any(state.waiting and state.running for state in states)
    old = _rewritten(log, tmp_path / "format3.jsonl", 3, [state_text_digest(s) for s in states])
    capsys.readouterr()
    assert main(["replay", str(old)]) == 0, capsys.readouterr().err
    assert main(["replay", str(old), "--workload", str(workload)]) == 0, capsys.readouterr().err
    assert "results and durations re-derived" in capsys.readouterr().out


@pytest.mark.parametrize(("log_format", "digest"), [(3, state_digest), (4, state_text_digest),
                                                    (5, state_text_digest),
                                                    (6, state_text_digest)])
def test_a_digest_of_the_other_format_diverges(run, tmp_path, capsys, log_format,
                                               digest) -> None:
    _, log = run
    states = _replayed_states(log)
    wrong = _rewritten(log, tmp_path / "wrong.jsonl", log_format, [digest(s) for s in states])
    capsys.readouterr()
    assert main(["replay", str(wrong)]) == 2
    assert "line 2, decision 0: state_digest differs" in capsys.readouterr().err


def test_the_digest_is_a_function_of_the_state_that_tells_states_apart(run) -> None:
    _, log = run
    states = _replayed_states(log)
    state = next(s for s in states if len(s.waiting) >= 2 and s.running)
    digest = state_digest(state)
    # another mapping order and other (equal) view objects: the same state
    reordered = {rid: state.views[rid]._replace() for rid in reversed(list(state.views))}
    assert state_digest(dataclasses.replace(state, views=reordered)) == digest
    first, second = state.waiting[:2]
    views = dict(state.views)
    # a waiting view (a multiset element) that changed
    views[first] = views[first]._replace(priority=views[first].priority + 1)
    assert state_digest(dataclasses.replace(state, views=views)) != digest
    # two waiting views that swap their arrival facts: the same multiset of
    # values would be a collision; the ids inside each element keep them apart
    swapped = dict(state.views)
    a, b = swapped[first], swapped[second]
    swapped[first] = a._replace(arrival=b.arrival, arrival_order=b.arrival_order)
    swapped[second] = b._replace(arrival=a.arrival, arrival_order=a.arrival_order)
    if (a.arrival, a.arrival_order) != (b.arrival, b.arrival_order):
        assert state_digest(dataclasses.replace(state, views=swapped)) != digest
    # a running view: its text is in the digest as it is
    rid = state.running[0]
    assert state.views[rid].lifecycle is Lifecycle.RUNNING
    views = dict(state.views)
    views[rid] = views[rid]._replace(last_output_time=(views[rid].last_output_time or 0) + 1)
    assert state_digest(dataclasses.replace(state, views=views)) != digest
    # the waiting order
    assert state_digest(dataclasses.replace(
        state, waiting=(second, first, *state.waiting[2:]))) != digest
