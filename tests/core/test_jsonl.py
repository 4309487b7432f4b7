"""records.jsonl: the one JSON Lines reader for user files (traces, events)."""

from __future__ import annotations

from pathlib import Path

import pytest

from iterserve.metrics.events import EventLogError, iter_jsonl
from iterserve.records.jsonl import json_objects
from iterserve.sim.traces import TraceError, read_trace


class Refused(ValueError):
    pass


def test_objects_with_their_line_numbers_blank_lines_skipped(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a": 1}\n\n   \n{"b": [2]}\n')
    assert list(json_objects(path, Refused)) == [(1, {"a": 1}), (4, {"b": [2]})]


@pytest.mark.parametrize(("content", "message"), [
    (b'{"a": 1}\n{"a": \n', ":2: not valid JSON"),
    (b'{"a": 1}\n[1, 2]\n', ":2: must be a JSON object"),
    (b'\n"text"\n', ":2: must be a JSON object"),
    (b'{"a": "\xff\xfe"}\n', ":1: not UTF-8 text"),
    (b'{"a": ' + b"9" * 5000 + b"}\n", ":1: not valid JSON"),
    (b"[" * 100_000 + b"\n", ":1: not valid JSON"),
])
def test_a_bad_line_is_the_callers_error_naming_path_and_line(tmp_path: Path, content: bytes,
                                                              message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(Refused, match=f"^{path}{message}"):
        list(json_objects(path, Refused))


def test_traces_and_events_read_a_bad_line_alike(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'\n{oops\n')
    with pytest.raises(TraceError) as trace_error:
        read_trace(path, "jsonl")
    with pytest.raises(EventLogError) as event_error:
        list(iter_jsonl(path))
    assert str(trace_error.value) == str(event_error.value)


def test_an_event_line_the_contract_refuses_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'\n{"kind": "nonsense", "time_s": 0}\n')
    with pytest.raises(EventLogError, match=f"^{path}:2: unknown event kind 'nonsense'"):
        list(iter_jsonl(path))
