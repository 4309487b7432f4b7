"""The decision log and the events written by a follower process (issue 15):
the same bytes as the in-process observers; a failed or diverging follower
is an error, and a failed run leaves no child behind."""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path

import pytest
from lab_helpers import chat_mix_manifest

from iterserve.admission.overload import make_gate
from iterserve.cost import default_cost_model, parse_cost_model
from iterserve.engine import loop
from iterserve.engine.observer import EngineObserver
from iterserve.policies.registry import make_policy, policy_for
from iterserve.records import Capacity, RequestSpec
from iterserve.records.columns import field_columns
from iterserve.records.errors import ServiceDebitMismatch, UnknownRequest
from iterserve.records.plan import Work
from iterserve.records.result import Completed
from iterserve.records.spec import HiddenTruth, KvSpec, OnlineWorkload, WorkloadManifest
from iterserve.sim import follower, report
from iterserve.sim.executor import SimulatedExecutor
from iterserve.sim.follower import (
    FeedReader,
    FeedWriter,
    FollowerError,
    RunEnd,
    plan_from_record,
    plan_record,
    result_from_record,
    result_record,
)
from iterserve.sim.report import RunConfig, run_simulation

MODEL = parse_cost_model("linear:8,0.02,0.1")


@pytest.fixture(autouse=True)
def two_cpus(monkeypatch) -> None:
    """The fork path whatever this machine's CPU count (it is correct on one
    CPU too, only not faster)."""
    monkeypatch.setattr(follower, "usable_cpus", lambda: 2)


@pytest.fixture
def forks(monkeypatch) -> list[int]:
    """Counts the followers started, so a test knows which path ran."""
    started: list[int] = []
    real = report.FollowerProcess

    def counted(follow):
        started.append(1)
        return real(follow)

    monkeypatch.setattr(report, "FollowerProcess", counted)
    return started


def _manifest(num_blocks: int, num_requests: int = 80) -> WorkloadManifest:
    return chat_mix_manifest(num_blocks, num_requests)


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


def _shared_prefix_manifest() -> WorkloadManifest:
    """Prompts with token ids sharing a prefix, planned prefix hits on: the
    executor's claims (and the hits a prefix-aware policy reads) are answers
    the follower must take from the feed too."""
    shared = tuple(range(100, 132))
    requests = tuple(RequestSpec(f"r{i}", float(i * 3), 36, 30 if i == 0 else 4,
                                 prompt_token_ids=shared + (i, i, i, i)) for i in range(6))
    kv = KvSpec(num_kv_blocks=64, block_size=4, bytes_per_row=8, plan_prefix_hits=True)
    online = OnlineWorkload("shared", "iteration", Capacity(64, 8), requests, kv=kv)
    return WorkloadManifest(online, HiddenTruth({r.request_id: r.max_output_tokens
                                                 for r in requests}))


def _outputs(tmp_path: Path, name: str, manifest: WorkloadManifest, config: RunConfig,
             log_process: bool, *, events_file: bool = True,
             **kwargs) -> tuple[bytes, str, report.SimulationRun]:
    """The decision log's bytes, the events' text and the run."""
    log_path, events_path = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.events.jsonl"
    memory = io.StringIO()
    with log_path.open("w") as stream, (events_path.open("w") if events_file else memory) as events:
        run = run_simulation(manifest, config, stream, log_process=log_process, events=events,
                             **kwargs)
        text = memory.getvalue()
    return log_path.read_bytes(), events_path.read_text() if events_file else text, run


@pytest.mark.parametrize(("policy", "num_blocks", "gate", "max_iterations"), [
    ("vllm", 4000, "accept-all", None),
    ("vllm", 60, "accept-all", None),  # a small pool: preemptions and resumes
    ("sarathi-serve", 200, "bounded", None),  # rejections at arrival: rejected lists
    ("vllm", 4000, "accept-all", 40),  # stopped early: a summary line
])
@pytest.mark.parametrize("events_file", [True, False], ids=["events-file", "events-unshared"])
def test_the_follower_writes_the_in_process_bytes(tmp_path, forks, policy, num_blocks, gate,
                                                  max_iterations, events_file) -> None:
    manifest = _manifest(num_blocks)
    serial = _outputs(tmp_path, "serial", manifest,
                      _config(manifest, policy, gate, max_iterations), False,
                      events_file=events_file)
    assert not forks
    followed = _outputs(tmp_path, "followed", manifest,
                        _config(manifest, policy, gate, max_iterations), True,
                        events_file=events_file)
    assert forks == [1]
    assert followed[0] == serial[0]
    assert len(serial[0].splitlines()) > 20
    assert followed[1] == serial[1]
    assert '"kind": "arrival"' in followed[1]
    # what the report reads of the recorder, sent back when the follower wrote the events
    assert list(followed[2].recorder.iterations) == list(serial[2].recorder.iterations)
    assert list(followed[2].recorder.samples) == list(serial[2].recorder.samples)
    assert followed[2].recorder.is_streaming
    assert followed[2].trace == serial[2].trace
    assert followed[2].ledger_trace.entries == serial[2].ledger_trace.entries


@pytest.mark.parametrize("policy", ["vllm", "prefix-quota"])
def test_prefix_hit_claims_reach_the_follower(tmp_path, forks, policy) -> None:
    manifest = _shared_prefix_manifest()
    model = default_cost_model("iteration")

    def config() -> RunConfig:
        return RunConfig(make_policy(policy), model, make_gate("accept-all", {}))
    serial = _outputs(tmp_path, "serial", manifest, config(), False)
    followed = _outputs(tmp_path, "followed", manifest, config(), True)
    assert forks == [1]
    assert followed[0] == serial[0] and followed[1] == serial[1]
    assert b"claimed_prefix_rows" in serial[0]  # the claims were there to follow


def test_without_a_shareable_stream_no_follower_starts(forks) -> None:
    manifest = _manifest(4000, 20)
    serial, followed = io.StringIO(), io.StringIO()
    run_simulation(manifest, _config(manifest), serial)
    run_simulation(manifest, _config(manifest), followed, log_process=True)
    assert not forks
    assert followed.getvalue() == serial.getvalue()


def test_without_a_decision_log_the_follower_keeps_the_events_and_the_traces(
        tmp_path, forks) -> None:
    """It records the events, the run trace and the ledger trace, and sends
    back what the report reads of them."""
    manifest = _manifest(60, 40)
    paths = [tmp_path / "serial.jsonl", tmp_path / "followed.jsonl"]
    runs = []
    for path, log_process in zip(paths, (False, True), strict=True):
        with path.open("w") as events:
            runs.append(run_simulation(manifest, _config(manifest, "sarathi-serve", "bounded"),
                                       None, events=events, log_process=log_process))
    assert forks == [1]
    assert paths[0].read_bytes() == paths[1].read_bytes()
    serial, followed = runs
    assert followed.trace == serial.trace and followed.trace.iterations
    assert followed.ledger_trace.entries == serial.ledger_trace.entries
    assert followed.ledger_trace.num_decisions == serial.ledger_trace.num_decisions
    assert list(followed.recorder.iterations) == list(serial.recorder.iterations)


def test_a_failed_follower_is_an_error(tmp_path) -> None:
    manifest = _manifest(4000, 20)
    path = tmp_path / "read-only.jsonl"
    path.write_text("")
    with path.open("r") as stream, pytest.raises(FollowerError, match="not writable"):
        run_simulation(manifest, _config(manifest), stream, log_process=True)  # type: ignore[arg-type]


def test_a_follower_that_ended_elsewhere_is_an_error(tmp_path, monkeypatch) -> None:
    manifest = _manifest(4000, 20)
    follow = report._follow

    def ends_elsewhere(*args):  # type: ignore[no-untyped-def]
        end, payload = follow(*args)
        return RunEnd(end.iterations + 1, end.state_digest), payload

    monkeypatch.setattr(report, "_follow", ends_elsewhere)
    with (tmp_path / "log.jsonl").open("w") as stream, \
            pytest.raises(FollowerError, match="ended elsewhere: after [0-9]+ iterations"):
        run_simulation(manifest, _config(manifest), stream, log_process=True)


def test_a_follower_that_stops_early_is_an_error(tmp_path, monkeypatch) -> None:
    """Its engine stops after 3 iterations: the feed holds answers it never
    asked for, which it says (or the run finds its feed broken)."""
    manifest = _manifest(4000, 20)
    follow = report._follow

    def stops_early(feed, manifest, config, *args):  # type: ignore[no-untyped-def]
        short = RunConfig(config.policy, config.cost_model, config.gate, 3)
        return follow(feed, manifest, short, *args)

    monkeypatch.setattr(report, "_follow", stops_early)
    with (tmp_path / "log.jsonl").open("w") as stream, \
            pytest.raises(FollowerError, match="never asked for"):
        run_simulation(manifest, _config(manifest), stream, log_process=True)


class _Fails(EngineObserver):
    def __init__(self) -> None:
        self.steps = 0

    def on_step(self, state, plan, result, successor) -> None:
        self.steps += 1
        if self.steps == 5:
            raise RuntimeError("observer failed")


def test_a_failed_run_stops_its_follower(tmp_path, forks) -> None:
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


class _Steps(EngineObserver):
    def __init__(self) -> None:
        self.steps: list[tuple[object, object]] = []

    def on_step(self, state, plan, result, successor) -> None:
        self.steps.append((plan, result))


def test_the_feed_records_give_back_equal_plans_and_results() -> None:
    """Over a run with preemptions, resumes, rejections and finishes: every
    field of every plan and result survives its feed record (positions
    rebuilt as ``range(start, end)``, which a validated plan holds)."""
    manifest = _manifest(60, 60)
    steps = _Steps()
    run_simulation(manifest, _config(manifest, "vllm"), None, [steps])
    assert any(plan.intents for plan, _ in steps.steps)  # preemptions were recorded
    assert any(not plan.work for plan, _ in steps.steps) or steps.steps
    as_planned = 0
    for plan, result in steps.steps:
        # the run's plans and results are Work and Completed, their kept columns exact
        assert type(plan.work) is Work and type(result.completed) is Completed
        assert field_columns(result.completed) == tuple(zip(*result.completed, strict=True))
        record = plan_record(plan)
        assert plan_from_record(record) == plan
        for decoded in (plan_from_record(record).work,
                        result_from_record(result_record(result, record), record).completed,
                        result_from_record(result_record(result)).completed):
            assert field_columns(decoded) == tuple(zip(*decoded, strict=True))
        assert result_from_record(result_record(result)) == result
        with_plan = result_record(result, record)
        as_planned += with_plan[3]
        assert result_from_record(with_plan, record) == result
    assert as_planned  # completions sent without the ids and intervals the plan holds
    with pytest.raises(FollowerError, match="refers to a plan the follower does not hold"):
        plan, result = next(step for step in steps.steps if step[1].completed)
        result_from_record(result_record(result, plan_record(plan)))


def test_the_feed_hands_records_over_in_order_and_names_a_mismatch() -> None:
    read_fd, write_fd = os.pipe()
    writer = FeedWriter(write_fd)
    for i in range(200):  # more than one frame
        writer.put(("claim", {f"r{i}": i}))
    writer.put(("capacity", None))
    writer.close()
    reader = FeedReader(read_fd)
    assert [reader.take("claim")[1] for _ in range(200)] == [{f"r{i}": i} for i in range(200)]
    with pytest.raises(FollowerError, match="asked for a claim where the run answered a capacity"):
        reader.take("claim")


def test_a_feed_that_ends_early_stops_the_follower() -> None:
    """The run's process died (or stopped writing): its end of the pipe is
    closed, and the follower's next question finds the feed's end."""
    read_fd, write_fd = os.pipe()
    writer = FeedWriter(write_fd)
    writer.put(("claim", {}))
    writer.close()
    reader = FeedReader(read_fd)
    reader.take("claim")
    with pytest.raises(FollowerError, match="feed ended where the follower asked for a plan"):
        reader.take("plan")
    truncated_read, truncated_write = os.pipe()
    os.write(truncated_write, b"\x10\x00\x00\x00\x00\x00\x00\x00abc")
    os.close(truncated_write)
    with pytest.raises(FollowerError, match="inside a frame"):
        FeedReader(truncated_read).take("plan")


def test_a_broken_feed_names_the_followers_reason(tmp_path, monkeypatch) -> None:
    """The follower fails at once: the run's next frame finds the pipe
    closed and the error is the follower's own, not a broken pipe."""
    manifest = _manifest(4000, 80)

    def fails(*args):  # type: ignore[no-untyped-def]
        raise ValueError("the follower could not start")

    monkeypatch.setattr(report, "_follow", fails)
    with (tmp_path / "log.jsonl").open("w") as stream, \
            pytest.raises(FollowerError, match="ValueError: the follower could not start"):
        run_simulation(manifest, _config(manifest), stream, log_process=True)


@pytest.mark.parametrize("log_process", [False, True], ids=["in-process", "follower"])
def test_a_forged_result_fails_the_run_with_or_without_a_follower(tmp_path, monkeypatch, forks,
                                                                  log_process) -> None:
    """Validation stays in the run's process: a result debiting more service
    than its completed rows fails the run, naming the rule, and a follower
    is stopped and reaped."""
    manifest = _manifest(4000, 40)
    real = SimulatedExecutor.execute

    def forged(self, plan, state):  # type: ignore[no-untyped-def]
        result = real(self, plan, state)
        if plan.decision_id != 7 or not result.service:
            return result
        client = next(iter(result.service))
        return dataclasses.replace(result, service={**result.service,
                                                    client: result.service[client] + 5})

    monkeypatch.setattr(SimulatedExecutor, "execute", forged)
    with (tmp_path / "log.jsonl").open("w") as stream, \
            pytest.raises(ServiceDebitMismatch, match="result debits .* completed rows give"):
        run_simulation(manifest, _config(manifest), stream, log_process=log_process)
    assert forks == ([1] if log_process else [])
    with pytest.raises(ChildProcessError):  # no child left behind
        os.waitpid(-1, os.WNOHANG)


def _breaks_a_state_in(monkeypatch, where: str) -> None:
    """From decision 7 the transition drops a running id from its queue
    (its view then belongs to no queue), in the run's process or in the
    follower only."""
    real, parent = loop.advance, os.getpid()

    def broken(state, plan, result):  # type: ignore[no-untyped-def]
        successor = real(state, plan, result)
        in_follower = os.getpid() != parent
        if successor.decision_id < 7 or not successor.running or (where == "follower") != in_follower:
            return successor
        return dataclasses.replace(successor, running=successor.running[1:])

    monkeypatch.setattr(loop, "advance", broken)


def test_a_broken_state_fails_the_run_in_process(tmp_path, monkeypatch, forks) -> None:
    manifest = _manifest(4000, 40)
    _breaks_a_state_in(monkeypatch, "run")
    with (tmp_path / "log.jsonl").open("w") as stream, \
            pytest.raises(UnknownRequest, match="a view belongs to no queue"):
        run_simulation(manifest, _config(manifest), stream, log_process=False)
    assert forks == []


def test_a_followed_run_checks_its_states_in_the_follower(tmp_path, monkeypatch, forks) -> None:
    """The follower holds the run's states and checks each (the run's process
    checks plans and results only): a state it refuses fails the run with
    the check's own message, and no child is left behind."""
    manifest = _manifest(4000, 40)
    _breaks_a_state_in(monkeypatch, "follower")
    with (tmp_path / "log.jsonl").open("w") as stream, \
            pytest.raises(FollowerError, match="UnknownRequest: a view belongs to no queue"):
        run_simulation(manifest, _config(manifest), stream, log_process=True)
    assert forks == [1]
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)
