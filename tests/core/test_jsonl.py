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


EDGE_LINES = [
    b'{"a": 1, "a": 2}',  # the last duplicate wins in both
    b'{"x": 123456789012345678901234567890}',  # past 64 bits: an int, not orjson's float
    b'{"x": -9223372036854775809, "y": 18446744073709551616}',
    b'{"x": 1e400, "y": -1e400}',  # inf, as the stdlib reads it
    b'{"x": NaN, "y": Infinity}',
    b'{"x": "\\ud800"}',  # a lone surrogate
    b'{"t": 0.1, "u": -0.0, "v": 5e-324, "w": 1.7976931348623157e308, "z": 1E2}',
    b'  {"a" : [1, 2, {"b": null}], "c": "\\u00e9\\n"}  \r',
    b'{"time_s": 12345.678901234567, "n": 9223372036854775807}',
]


@pytest.mark.parametrize("line", EDGE_LINES)
def test_a_line_reads_as_the_stdlib_reads_it(tmp_path: Path, line: bytes) -> None:
    import json

    path = tmp_path / "edge.jsonl"
    path.write_bytes(line + b"\n")
    [(number, obj)] = list(json_objects(path, Refused))
    expected = json.loads(line.decode("utf-8"))
    assert number == 1
    assert repr(obj) == repr(expected)  # repr: nan == nan is False, and int vs float shows
    assert [type(value) for value in obj.values()] == [type(v) for v in expected.values()]
