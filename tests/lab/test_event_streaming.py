"""Metric events streamed to disk during a run are the bytes of the
in-memory log written afterwards (issue 15 step 1)."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
from lab_helpers import chat_mix_manifest

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
    NotReadyEvent,
    PreemptEvent,
    ReadyEvent,
    RejectEvent,
    ScheduleEvent,
    TokenEvent,
    event_line,
    event_lines,
    event_to_dict,
    iter_jsonl,
    write_jsonl,
)
from iterserve.policies.registry import policy_for
from iterserve.records.plan import WorkItem
from iterserve.records.result import CompletedInterval
from iterserve.records.view import Lifecycle, RequestView, WorkKind
from iterserve.sim.report import RunConfig, run_simulation

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
    NotReadyEvent(6.25, "r9"),
    ReadyEvent(7.0, "r9"),
]


def test_every_event_kind_has_a_sample() -> None:
    kinds = {event.kind for event in SAMPLES}
    assert kinds | {"admit", "first_token", "resume"} == set(EVENT_TYPES)


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.kind)
def test_event_line_is_json_dumps_byte_for_byte(event) -> None:
    assert event_line(event) == json.dumps(event_to_dict(event), allow_nan=False)


def _chat_mix(num_blocks: int):
    return chat_mix_manifest(num_blocks, 120)


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


def test_a_run_of_tokens_at_one_time_is_one_line(tmp_path) -> None:
    """Consecutive token events with one time text are one ``tokens`` line; a
    single token keeps its ``token`` line; any other fact, or another time
    text (4 and 4.0 are two), ends a run. Read back: the same events."""
    events = [ArrivalEvent(1.0, "a", client_id="c"), ArrivalEvent(1.0, "b\u00e9", client_id="c"),
              TokenEvent(3.0, "a", token_index=1), TokenEvent(3.0, "b\u00e9", token_index=1),
              FinishEvent(3.0, "b\u00e9", reason="length", num_output_tokens=2),
              TokenEvent(3.0, "a", token_index=2), TokenEvent(4.0, "a", token_index=3),
              TokenEvent(4, "a", token_index=4), TokenEvent(4, "a", token_index=5)]
    lines = list(event_lines(events))
    assert [json.loads(line)["kind"] for line in lines] == [
        "arrival", "arrival", "tokens", "finish", "token", "token", "tokens"]
    assert lines[2] == ('{"kind": "tokens", "time_s": 3.0, "request_ids": ["a", "b\\u00e9"], '
                        '"token_indices": [1, 1]}\n')
    assert lines[4] == event_line(events[5]) + "\n"
    assert lines[6] == ('{"kind": "tokens", "time_s": 4, "request_ids": ["a", "a"], '
                        '"token_indices": [4, 5]}\n')
    (tmp_path / "events.jsonl").write_text("".join(lines))
    assert list(iter_jsonl(tmp_path / "events.jsonl")) == events


def _cut(recorder: EventRecorder, now: float, published: float, emitted: dict[str, int]) -> None:
    """One on_step whose decode rows emit a plain token for each request."""
    views = {rid: RequestView(rid, 0, 0, "c", 0, 0.0, 0, 10, 100, num_emitted=count,
                              num_computed=9 + count, num_committed=9 + count,
                              lifecycle=Lifecycle.RUNNING)
             for rid, count in emitted.items()}
    state = SimpleNamespace(now=now, views=views, waiting=(), suspended=(), running=tuple(views),
                            capacity=SimpleNamespace(num_blocks_total=None, num_blocks_free=None))
    work = tuple(WorkItem(rid, 0, 0, 10 + count, 11 + count, WorkKind.DECODE_ROW,
                          range(10 + count, 11 + count)) for rid, count in emitted.items())
    completed = tuple(CompletedInterval(item.request_id, 0, item.start, item.end, True)
                      for item in work)
    recorder.on_step(state, SimpleNamespace(intents=(), work=work),  # type: ignore[arg-type]
                     SimpleNamespace(completed=completed),
                     SimpleNamespace(now=published, finished=()))


def test_tokens_of_two_cuts_at_one_time_stream_as_one_line(tmp_path) -> None:
    """The recorder holds its last run of tokens back until a fact follows
    it: the next cut's tokens at the same time join it, as they do in the
    in-memory log written afterwards."""
    stream, in_memory = io.StringIO(), EventRecorder(1.0)
    streamed = EventRecorder(1.0, stream)
    for recorder in (streamed, in_memory):
        _cut(recorder, 1.0, 2.0, {"a": 1, "b": 1})
        _cut(recorder, 2.0, 2.0, {"a": 2, "b": 2})
        _cut(recorder, 2.0, 3.0, {"a": 3})
        recorder.on_cancel("a", SimpleNamespace(now=3.0),  # type: ignore[arg-type]
                           SimpleNamespace(finished=("a",)))  # type: ignore[arg-type]
        _cut(recorder, 3.0, 4.0, {"b": 3})
        recorder.close()
    expected = tmp_path / "expected.jsonl"
    write_jsonl(in_memory.log(), expected)
    assert stream.getvalue() == expected.read_text()
    assert [json.loads(line)["kind"] for line in stream.getvalue().splitlines()] == [
        "tokens", "token", "cancel", "token"]
    assert json.loads(stream.getvalue().splitlines()[0])["token_indices"] == [1, 1, 2, 2]


@pytest.mark.parametrize("log_process", [False, True], ids=["serial", "followed"])
def test_a_simulation_composition_from_its_trace_is_the_observed_one(tmp_path,
                                                                     log_process) -> None:
    """A simulation's recorder takes the batch composition made from the run
    trace: the records a composing recorder observing the run keeps."""
    manifest = _chat_mix(60)  # a small pool: preemptions
    model = parse_cost_model("linear:8,0.02,0.1")
    config = RunConfig(policy_for("vllm", manifest.online, cost_model=model), model,
                       make_gate("accept-all", {}))
    observed = EventRecorder(1e-3)  # the ms clock's unit
    with (tmp_path / "log.jsonl").open("w") as log, (tmp_path / "ev.jsonl").open("w") as events:
        run = run_simulation(manifest, config, log, [observed], events=events,
                             log_process=log_process)
    assert len(run.recorder.iterations) == len(observed.iterations) > 50
    assert run.recorder.iterations == observed.iterations
    assert run.recorder.samples == observed.samples
    assert max(sample.num_kv_blocks_used for sample in run.recorder.samples) > 0


def test_a_recorder_adopts_a_composition_only_where_it_keeps_none() -> None:
    from iterserve.engine.composition import BatchComposition, composition_of

    composition = composition_of([], 1e-3)
    assert len(composition.iterations) == len(composition.samples) == 0
    silent = EventRecorder(1e-3, io.StringIO(), composes=False)
    assert silent.adopt_composition(composition).iterations is composition.iterations
    with pytest.raises(ValueError, match="its own composition"):
        EventRecorder(1e-3).adopt_composition(composition)
    with pytest.raises(ValueError, match="another clock"):
        EventRecorder(1.0, composes=False).adopt_composition(composition)
    with pytest.raises(ValueError, match="must be > 0"):
        BatchComposition(0.0)


def test_record_columns_extend_by_whole_columns_all_or_none() -> None:
    from iterserve.metrics.capacity import IterationComposition
    from iterserve.metrics.columns import RecordColumns

    columns = RecordColumns(IterationComposition, "dqqqq")
    columns.extend_columns([[0.5, 1.5], [3, 0], [1, 2], [0, 0], [2, 2]])
    assert list(columns) == [IterationComposition(0.5, 3, 1, 0, 2),
                             IterationComposition(1.5, 0, 2, 0, 2)]
    with pytest.raises(TypeError, match=r"num_decode_rows: \['float'\] values"):
        columns.extend_columns([[2.5], [1], [1.0], [0], [1]])
    with pytest.raises(TypeError, match=r"time_s: \['int'\] values do not fit a float"):
        columns.extend_columns([[3], [1], [1], [0], [1]])
    with pytest.raises(ValueError, match="different lengths"):
        columns.extend_columns([[2.5], [1], [1, 2], [0], [1]])
    with pytest.raises(ValueError, match="a column per field"):
        columns.extend_columns([[2.5]])
    assert len(columns) == 2  # nothing of a refused extension
