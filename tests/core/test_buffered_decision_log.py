"""The online decision log queues each step's records and encodes them later
(off the step path): the text it writes is the text eager encoding writes,
rejections, cancellations and arrivals in place. Requests declared while the
engine runs are ``arrival`` lines, and such a log replays bit for bit."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from iterserve.admission.overload import engine_gate, make_gate
from iterserve.engine.decision_log import DecisionLogWriter, GateRecord
from iterserve.engine.log_reader import ReplayDivergence
from iterserve.engine.loop import Engine
from iterserve.engine.online_log import OnlineDecisionLog
from iterserve.policies.registry import make_policy
from iterserve.records import Capacity, HiddenTruth, OnlineWorkload, RequestSpec
from iterserve.sim.executor import SimulatedExecutor
from iterserve.sim.replay import replay


class _EagerLog(OnlineDecisionLog):
    """The log as it was: every fact encoded when the observer hears it."""

    on_step = DecisionLogWriter.on_step
    on_reject = DecisionLogWriter.on_reject
    on_cancel = DecisionLogWriter.on_cancel


def _log(log_type: type[OnlineDecisionLog], engine: Engine, sink: io.StringIO | None = None,
         gate: GateRecord | None = None) -> OnlineDecisionLog:
    log = log_type(sink or io.StringIO(), engine.bound_workload, engine.executor.capacity(),
                   gate=gate, policy_settings={}, executor="simulated")
    engine.observers.append(log)
    return log


def _run(log_type: type[OnlineDecisionLog]) -> tuple[OnlineDecisionLog, Engine]:
    requests = tuple(RequestSpec(f"r{i}", float(i // 3), 4 + i, 3 + i) for i in range(9))
    workload = OnlineWorkload("buffered", "iteration", Capacity(16, 4), requests)
    hidden = HiddenTruth({spec.request_id: spec.max_output_tokens for spec in requests})
    gate = engine_gate(make_gate("bounded", {"max_live": 5}))
    engine = Engine(workload, make_policy("vllm"), SimulatedExecutor(hidden), gate=gate)
    log = _log(log_type, engine)
    for _ in range(4):
        engine.step()
    engine.cancel("r4")
    engine.run()
    return log, engine


def test_deferred_lines_equal_eager_lines() -> None:
    deferred, engine = _run(OnlineDecisionLog)
    eager, _ = _run(_EagerLog)
    assert deferred.num_queued > 0  # nothing encoded on the step path
    text = deferred.text(engine.state, is_done=engine.is_done)
    expected = eager.text(engine.state, is_done=engine.is_done)
    assert text == expected
    assert '"rejected"' in text and '"type":"cancel"' in text
    assert deferred.text(engine.state, is_done=engine.is_done) == text  # reading keeps nothing


def test_flush_encodes_a_slice_at_a_time_in_order() -> None:
    deferred, engine = _run(OnlineDecisionLog)
    eager, _ = _run(_EagerLog)
    queued = [deferred.num_queued]
    while deferred.flush(2):
        queued.append(deferred.num_queued)
        assert queued[-2] - queued[-1] == 2
    assert len(queued) > 4
    state = engine.state
    assert deferred.text(state, is_done=True) == eager.text(state, is_done=True)
    assert not deferred.flush()


def _online_run(sink: io.StringIO, num_requests: int = 40) -> tuple[OnlineDecisionLog, Engine]:
    """Requests declared between steps, as the online front declares them,
    with a gate that rejects some and a cancellation."""
    hidden = HiddenTruth({f"q{i}": 2 + i % 5 for i in range(num_requests)})
    workload = OnlineWorkload("online", "iteration", Capacity(16, 4), ())
    gate = make_gate("bounded", {"max_live": 6})
    engine = Engine(workload, make_policy("vllm"), SimulatedExecutor(hidden),
                    gate=engine_gate(gate))
    log = _log(OnlineDecisionLog, engine, sink, GateRecord(gate.gate_id, gate.params()))
    for i in range(0, num_requests, 4):
        start = max(engine.last_arrival, engine.state.now + 1.0)
        specs = [RequestSpec(f"q{j}", start + (j - i) // 2, 3 + j % 7, 2 + j % 5)
                 for j in range(i, i + 4)]
        log.on_declare(specs, engine.state)
        engine.submit(specs)
        engine.step()
        if i == 8:
            engine.cancel(next(iter(engine.state.running or engine.state.waiting)))
    engine.run()
    return log, engine


def test_an_online_log_streams_arrivals_and_replays_bit_for_bit(tmp_path: Path) -> None:
    sink = io.StringIO()
    log, engine = _online_run(sink)
    log.close(engine.state, is_done=engine.is_done)
    text = sink.getvalue()
    assert '"requests":[]' in text.splitlines()[0]  # the header holds no request
    assert text.count('"type":"arrival"') == 10
    assert '"rejected"' in text and '"type":"cancel"' in text
    assert engine.num_pending_arrivals == 0  # published specs are not kept
    path = tmp_path / "online.jsonl"
    path.write_text(text)
    assert replay(path).num_iterations == engine.num_iterations
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text(text.replace('"request_id":"q5"', '"request_id":"q5x"', 1))
    with pytest.raises(ReplayDivergence, match="line"):
        replay(tampered)


def test_the_log_streams_every_line_once_closed() -> None:
    """Closed, the sink holds what the in-memory text held: nothing is
    rewritten at the end, so lines may leave memory as they are made."""
    sink = io.StringIO()
    log, engine = _online_run(sink)
    text = log.text(engine.state, is_done=engine.is_done)
    log.close(engine.state, is_done=engine.is_done)
    assert sink.getvalue() == text
    assert log.num_queued == 0


def test_an_online_log_from_before_arrival_lines_still_replays(tmp_path: Path) -> None:
    """A real-model online log written before arrival lines existed (every
    request declared in its header; ``LLM.generate`` over two batches)."""
    fixture = Path(__file__).parent / "fixtures" / "online_before_arrival_lines.jsonl.gz"
    log = tmp_path / "online.jsonl"
    log.write_bytes(gzip.decompress(fixture.read_bytes()))
    text = log.read_text()
    assert '"type":"arrival"' not in text and text.count('"request_id":"req-') >= 4
    assert replay(log).num_iterations == text.count('"type":"iteration"')


def test_a_busy_engine_finds_the_log_backlogged_past_its_bound() -> None:
    """The online front encodes on the step path once ``max_queued`` facts
    wait, so a never-idle engine's queue stays bounded."""
    workload = OnlineWorkload("online", "ms", Capacity(16, 4), ())
    engine = Engine(workload, make_policy("vllm"), SimulatedExecutor(HiddenTruth({})))
    log = OnlineDecisionLog(io.StringIO(), engine.bound_workload, engine.executor.capacity(),
                            gate=None, policy_settings={}, executor="simulated", max_queued=3)
    for i in range(3):
        assert not log.is_backlogged
        log.on_declare([RequestSpec(f"r{i}", float(i), 4, 2)], engine.state)
    assert log.is_backlogged and log.num_queued == 3
    assert not log.flush() and not log.is_backlogged
    with pytest.raises(ValueError, match="max_queued"):
        OnlineDecisionLog(io.StringIO(), engine.bound_workload, engine.executor.capacity(),
                          gate=None, policy_settings={}, executor="simulated", max_queued=0)
