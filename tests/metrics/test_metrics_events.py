"""Event records, the append-only log and JSONL round trips."""

import json
from pathlib import Path

import pytest
from metrics_fixtures import burst_accept_all

from iterserve.metrics import (
    ArrivalEvent,
    CancelEvent,
    ComputeEvent,
    EventLog,
    EventLogError,
    FinishEvent,
    ScheduleEvent,
    TokenEvent,
    read_jsonl,
)
from iterserve.metrics.events import EVENT_TYPES, event_from_dict, event_to_dict


def test_jsonl_round_trip_is_exact(tmp_path: Path) -> None:
    log = burst_accept_all()
    log.append(ScheduleEvent(0.07, "A", iteration_index=7, num_rows=1))
    path = tmp_path / "run.events.jsonl"
    log.write_jsonl(path)
    assert EventLog.read_jsonl(path).events == log.events
    assert len(path.read_text().splitlines()) == len(log)


def test_jsonl_key_order_is_kind_then_declared_fields(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    EventLog([TokenEvent(0.5, "r1", token_index=3)]).write_jsonl(path)
    line = path.read_text().splitlines()[0]
    assert line == '{"kind": "token", "time_s": 0.5, "request_id": "r1", "token_index": 3}'
    assert list(json.loads(line)) == ["kind", "time_s", "request_id", "token_index"]


def test_every_kind_is_registered_once() -> None:
    assert sorted(EVENT_TYPES) == sorted(
        [
            "arrival",
            "admit",
            "reject",
            "schedule",
            "compute",
            "first_token",
            "token",
            "finish",
            "cancel",
            "preempt",
            "resume",
            "not_ready",
            "ready",
        ]
    )


def test_unknown_kind_raises_and_lists_valid_kinds() -> None:
    with pytest.raises(EventLogError, match="valid kinds"):
        event_from_dict({"kind": "teleport", "time_s": 0.0, "request_id": "r"})


def test_unknown_field_raises() -> None:
    with pytest.raises(EventLogError, match="bad fields"):
        event_from_dict({"kind": "admit", "time_s": 0.0, "request_id": "r", "slot": 3})


def test_blank_lines_skipped_and_bad_json_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps(event_to_dict(ArrivalEvent(0.0, "r")))
    path.write_text(good + "\n\n{not json\n")
    with pytest.raises(EventLogError, match=":3: not valid JSON"):
        read_jsonl(path)


def test_log_rejects_a_clock_that_goes_backwards() -> None:
    log = EventLog([ArrivalEvent(1.0, "r")])
    with pytest.raises(EventLogError, match="precedes"):
        log.append(CancelEvent(0.5, "r", reason="client"))
    assert len(log) == 1


def test_log_hands_out_immutable_views() -> None:
    log = EventLog([ArrivalEvent(1.0, "r")])
    assert isinstance(log.events, tuple)
    with pytest.raises(AttributeError):
        log.events[0].time_s = 2.0  # type: ignore[misc]


@pytest.mark.parametrize(
    "build",
    [
        lambda: ArrivalEvent(-1.0, "r"),
        lambda: ArrivalEvent(float("nan"), "r"),
        lambda: ArrivalEvent(True, "r"),
        lambda: ArrivalEvent(0.0, ""),
        lambda: ArrivalEvent(0.0, "r", client_id=""),
        lambda: ArrivalEvent(0.0, "r", num_prompt_tokens=-1),
        lambda: TokenEvent(0.0, "r", token_index=0),
        lambda: FinishEvent(0.0, "r", reason="", num_output_tokens=1),
        lambda: ComputeEvent(0.0, "r", num_rows=-2),
        lambda: ScheduleEvent(0.0, "r", iteration_index=-1, num_rows=1),
    ],
)
def test_malformed_records_raise(build) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(EventLogError):
        build()
