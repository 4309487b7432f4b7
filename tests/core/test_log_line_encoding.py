"""A decision-log line whose plan and result rows are encoded ahead (the
writer's hot path, issue 15 step 1) has the text of the plain line; the
trace's row counts by kind are the per-kind sums."""

from __future__ import annotations

import pytest

from iterserve.admission.overload import engine_gate, make_gate
from iterserve.engine.decision_log import iteration_line
from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.engine.trace import rows_by_kind
from iterserve.policies.registry import make_policy
from iterserve.records import Capacity, HiddenTruth, OnlineWorkload, RequestSpec
from iterserve.records.codec import (
    dumps,
    plan_to_json,
    plan_to_line_json,
    result_to_json,
    result_to_line_json,
)
from iterserve.records.plan import IterationPlan, make_work
from iterserve.records.result import CompletedInterval, IterationResult
from iterserve.records.view import FinishReason, WorkKind
from iterserve.sim.executor import SimulatedExecutor


class _Steps(EngineObserver):
    def __init__(self) -> None:
        self.steps: list[tuple] = []

    def on_step(self, state, plan, result, successor) -> None:
        self.steps.append((state, plan, result))


def _steps() -> list[tuple]:
    """A small pool, a bounded gate and a cancellation: prefill, decode,
    preemption and finish rows."""
    requests = tuple(RequestSpec(f"r{i}", float(i // 3), 4 + i, 3 + i) for i in range(9))
    workload = OnlineWorkload("encoded", "iteration", Capacity(16, 4), requests)
    hidden = HiddenTruth({spec.request_id: spec.max_output_tokens for spec in requests})
    gate = engine_gate(make_gate("bounded", {"max_live": 5}))
    engine = Engine(workload, make_policy("vllm"), SimulatedExecutor(hidden), gate=gate)
    steps = _Steps()
    engine.observers.append(steps)
    for _ in range(4):
        engine.step()
    engine.cancel("r4")
    engine.run()
    return steps.steps


def test_encoded_rows_write_the_plain_line() -> None:
    steps = _steps()
    assert len(steps) > 5
    for state, plan, result in steps:
        assert dumps(plan_to_line_json(plan)) == dumps(plan_to_json(plan))
        assert dumps(result_to_line_json(result, plan, state)) == dumps(
            result_to_json(result, plan, state))
        plain = iteration_line(state, plan, result)
        encoded = iteration_line(state, plan, result, encode_rows=True)
        assert dumps(encoded) == dumps(plain) and encoded == plain


def _forged() -> tuple[IterationPlan, IterationResult]:
    """Values orjson writes differently (non-ASCII, a small float), a dict
    in a tie-break and a finish reason: the fallbacks."""
    work = (make_work("r\u00e9", 0, 1, 0, 4, WorkKind.PREFILL_CHUNK, ({"z": 1, "a": 2e-05},)),
            make_work("r{1}", 0, 1, 7, 8, WorkKind.DECODE_ROW, (0, 1, "r{1}", 0)))
    plan = IterationPlan(3, 4, "vllm", "1", work, 5, 2, ("rank",))
    completed = (CompletedInterval("r\u00e9", 0, 0, 4, True, 11),
                 CompletedInterval("r{1}", 0, 7, 8, True, 12, FinishReason.LENGTH))
    return plan, IterationResult(3, 4, completed, duration=1e-06)


def test_forged_rows_write_the_plain_text() -> None:
    plan, result = _forged()
    assert dumps(plan_to_line_json(plan)) == dumps(plan_to_json(plan))
    assert dumps(result_to_line_json(result)) == dumps(result_to_json(result))
    assert plan_to_json(plan)["work"][0]["tie_break"] == [{"z": 1, "a": 2e-05}]
    assert result_to_json(result)["completed"][1]["finish_reason"] == "length"


def test_rows_by_kind_sums_each_kind() -> None:
    steps = _steps()
    for _, plan, _ in steps:
        expected = dict.fromkeys(WorkKind, 0)
        for item in plan.work:
            expected[item.kind] += item.end - item.start
        assert rows_by_kind(plan.work) == (expected[WorkKind.PREFILL_CHUNK],
                                           expected[WorkKind.DECODE_ROW],
                                           expected[WorkKind.REBUILD])
    plan, _ = _forged()
    assert rows_by_kind(plan.work) == (4, 1, 0)
    assert rows_by_kind([make_work("r", 0, 1, 0, 3, WorkKind.REBUILD)]) == (0, 0, 3)
    with pytest.raises(KeyError):
        rows_by_kind([make_work("r", 0, 1, 0, 3, "PREFILL_CHUNK")])  # type: ignore[arg-type]
