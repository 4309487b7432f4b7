"""The online decision log queues each step's records and encodes them later
(off the step path): the text it writes is the text eager encoding writes,
rejections and cancellations in place."""

from __future__ import annotations

from iterserve.admission.overload import engine_gate, make_gate
from iterserve.engine.decision_log import DecisionLogWriter
from iterserve.engine.loop import Engine
from iterserve.engine.online_log import BufferedDecisionLog
from iterserve.policies.registry import make_policy
from iterserve.records import Capacity, HiddenTruth, OnlineWorkload, RequestSpec
from iterserve.sim.executor import SimulatedExecutor


class _EagerLog(BufferedDecisionLog):
    """The log as it was: every fact encoded when the observer hears it."""

    on_step = DecisionLogWriter.on_step
    on_reject = DecisionLogWriter.on_reject
    on_cancel = DecisionLogWriter.on_cancel


def _run(log_type: type[BufferedDecisionLog]) -> tuple[BufferedDecisionLog, Engine]:
    requests = tuple(RequestSpec(f"r{i}", float(i // 3), 4 + i, 3 + i) for i in range(9))
    workload = OnlineWorkload("buffered", "iteration", Capacity(16, 4), requests)
    hidden = HiddenTruth({spec.request_id: spec.max_output_tokens for spec in requests})
    gate = engine_gate(make_gate("bounded", {"max_live": 5}))
    engine = Engine(workload, make_policy("vllm"), SimulatedExecutor(hidden), gate=gate)
    log = log_type(engine.workload, engine.executor.capacity(), gate=None,
                   policy_settings={}, executor="simulated")
    engine.observers.append(log)
    for _ in range(4):
        engine.step()
    engine.cancel("r4")
    engine.run()
    return log, engine


def test_deferred_lines_equal_eager_lines() -> None:
    deferred, engine = _run(BufferedDecisionLog)
    eager, _ = _run(_EagerLog)
    assert deferred._lines == []  # nothing encoded on the step path
    text = deferred.text(engine.workload, engine.state, is_done=engine.is_done)
    expected = eager.text(engine.workload, engine.state, is_done=engine.is_done)
    assert text == expected
    assert '"rejected"' in text and '"type":"cancel"' in text
    assert deferred.text(engine.workload, engine.state, is_done=engine.is_done) == text


def test_flush_encodes_a_slice_at_a_time_in_order() -> None:
    deferred, engine = _run(BufferedDecisionLog)
    eager, _ = _run(_EagerLog)
    num_lines = [0]  # a fact is a line, or a rejection that rides on the next line
    while deferred.flush(2):
        num_lines.append(len(deferred._lines))
        assert 0 <= num_lines[-1] - num_lines[-2] <= 2
    assert len(num_lines) > 4
    assert deferred._lines == eager._lines
    assert not deferred.flush()


def test_a_declaration_costs_its_own_requests_and_the_workload_holds_them_all() -> None:
    """``Engine.submit`` appends (the step loop checks against the workload
    the engine was made with); ``Engine.workload`` joins the declared
    requests when read, once per change."""
    workload = OnlineWorkload("online", "ms", Capacity(16, 4), ())
    engine = Engine(workload, make_policy("vllm"), SimulatedExecutor(HiddenTruth({})))
    declared = [RequestSpec(f"r{i}", float(i), 4, 2) for i in range(1000)]
    for spec in declared:
        engine.submit([spec])
    assert engine.bound_workload.requests == ()  # nothing copied per declaration
    assert engine.workload.requests == tuple(declared)
    assert engine.workload is engine.workload  # joined once, not at every read
    engine.submit([RequestSpec("late", 2000.0, 4, 2)])
    assert engine.workload.requests[-1].request_id == "late"
    assert len(engine.workload.requests) == 1001
