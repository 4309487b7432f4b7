"""Metric events streamed to disk during a run are the bytes of the
in-memory log written afterwards (issue 15 step 1)."""

from __future__ import annotations

import io
import json

import pytest
from lab_helpers import CHAT_MIX

from iterserve.admission.overload import make_gate
from iterserve.cost import parse_cost_model
from iterserve.engine.events import EventRecorder
from iterserve.metrics.events import (
    EVENT_TYPES,
    ArrivalEvent,
    CancelEvent,
    ComputeEvent,
    EventLogError,
    FinishEvent,
    PreemptEvent,
    RejectEvent,
    ScheduleEvent,
    TokenEvent,
    event_line,
    event_to_dict,
    write_jsonl,
)
from iterserve.policies.registry import policy_for
from iterserve.sim.generators import generate_workload
from iterserve.sim.report import RunConfig, run_simulation
from iterserve.sim.traces import trace_lengths
from iterserve.sim.workload_spec import parse_spec

SAMPLES = [
    ArrivalEvent(0, "r\u00e9q \"1\"", client_id="c\n", num_prompt_tokens=None),
    ArrivalEvent(1e-7, "r1", client_id="c", num_prompt_tokens=12),
    RejectEvent(2.5, "r2", reason="max_live"),
    ScheduleEvent(3.0, "r3", iteration_index=0, num_rows=4),
    ComputeEvent(0.1 + 0.2, "r4", num_rows=7, is_rebuild=True),
    TokenEvent(1e22, "r5", token_index=3),
    FinishEvent(12345.678901234, "r6", reason="length", num_output_tokens=9),
    CancelEvent(4, "r7", reason="abort"),
    PreemptEvent(5.5, "r8", mode="swap"),
]


def test_every_event_kind_has_a_sample() -> None:
    kinds = {event.kind for event in SAMPLES}
    assert kinds | {"admit", "first_token", "resume"} == set(EVENT_TYPES)


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.kind)
def test_event_line_is_json_dumps_byte_for_byte(event) -> None:
    assert event_line(event) == json.dumps(event_to_dict(event), allow_nan=False)


def _chat_mix(num_blocks: int):
    raw = json.loads(CHAT_MIX.read_text())
    raw["kv"]["num_blocks"] = num_blocks
    raw["num_requests"] = 120
    return generate_workload(parse_spec(raw, lambda path, fmt, column: trace_lengths(
        CHAT_MIX.parent / path, fmt, column)))


@pytest.mark.parametrize(("policy", "num_blocks", "gate"), [
    ("vllm", 4000, "accept-all"),
    ("vllm", 60, "accept-all"),  # a small pool: preemptions and resumes
    ("sarathi-serve", 200, "bounded"),  # rejections at arrival
])
def test_streamed_events_equal_the_in_memory_log(tmp_path, policy, num_blocks, gate) -> None:
    manifest = _chat_mix(num_blocks)
    model = parse_cost_model("linear:8,0.02,0.1")
    params = {"max_live": 20} if gate == "bounded" else {}

    def config() -> RunConfig:
        made = policy_for(policy, manifest.online, cost_model=model)
        return RunConfig(made, model, make_gate(gate, params))

    in_memory = run_simulation(manifest, config())
    expected = tmp_path / "expected.jsonl"
    write_jsonl(in_memory.recorder.log(), expected)
    stream = io.StringIO()
    streamed = run_simulation(manifest, config(), events=stream)
    assert stream.getvalue() == expected.read_text()
    kinds = {json.loads(line)["kind"] for line in stream.getvalue().splitlines()}
    assert {"arrival", "first_token", "token", "finish"} <= kinds
    assert streamed.recorder.iterations == in_memory.recorder.iterations
    with pytest.raises(ValueError, match="streamed"):
        streamed.recorder.log()


def test_a_fact_before_what_was_written_raises() -> None:
    stream = io.StringIO()
    recorder = EventRecorder(1.0, stream)
    recorder.on_reject(_spec(arrival=5.0), "max_live", 5.0)
    recorder.close()
    recorder.on_reject(_spec(arrival=4.0), "max_live", 4.0)
    with pytest.raises(EventLogError, match="precedes"):
        recorder.close()


def _spec(arrival: float):
    from iterserve.records.spec import RequestSpec

    return RequestSpec(request_id=f"r{arrival}", arrival=arrival, num_prompt_tokens=4,
                       max_output_tokens=4)
