"""Decision-log format 6 (issue 37): tables whose bytes follow the values
that differ, optional zstd compression, and replay of both.

- the table encoding gives back every column exactly (types included:
  ``1``, ``1.0`` and ``True`` are equal in Python, never in the log);
- a run's format-6 log replays bit for bit, and turned into format 5 and
  back it is the same bytes;
- a ``.zst`` log is the same text compressed, written by the follower or in
  process alike, and replays; an edited line of a compressed or an
  uncompressed log is named by its line number; a cut compressed file is
  one line naming it;
- a line's bytes do not grow with the waiting queue: two runs that schedule
  the same work with ten times more requests waiting write lines of equal
  length, line for line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from iterserve.cli.main import main
from iterserve.engine.log_reader import MalformedLog, read_log
from iterserve.records.codec import dumps
from iterserve.records.compressed_text import decompressed
from iterserve.records.log_columns import decode_table, encode_table
from log_rows import as_columns, as_format, row_lines

from .helpers import random_workload_json, write_json

COST_MODEL = "linear:5,0.5,0.25"
NAMES = ("a", "b", "end", "tie_break")
#: every form tried on every field it may apply to
HINTS = {"a": ("runs", "steps", "numbered"), "b": ("same:a", "runs", "steps", "numbered"),
         "end": ("same:b", "plus:a", "runs", "steps"),
         "tie_break": ("same:a", "same:b", "runs", "steps", "numbered")}


# --- the table encoding ----------------------------------------------------------------------
_SCALARS = st.one_of(st.integers(-3, 3), st.booleans(), st.none(), st.sampled_from(["x", "y"]),
                     st.sampled_from([0.0, -0.0, 1.0, 2.5]))


@st.composite
def _tables(draw: Any) -> tuple[dict[str, list[Any]], int]:
    num_rows = draw(st.integers(0, 12))
    column = st.lists(_SCALARS, min_size=num_rows, max_size=num_rows)
    runs = st.lists(st.sampled_from([0, 1, True, None, "x"]), min_size=num_rows,
                    max_size=num_rows).map(sorted_by_type)
    ints = st.lists(st.integers(0, 2000), min_size=num_rows, max_size=num_rows)
    ids = st.lists(st.one_of(st.integers(0, 999).map(lambda n: f"r{n:03d}"),
                             st.sampled_from(["r1", "r01", "r0a", "r", "r\u0663\u0663\u0663"])),
                   min_size=num_rows, max_size=num_rows)
    arity = draw(st.integers(0, 3))
    keys = st.lists(st.lists(_SCALARS, min_size=arity, max_size=arity), min_size=num_rows,
                    max_size=num_rows)
    a = draw(st.one_of(column, runs, ints, ids))
    b = draw(st.one_of(column, st.just(list(a)), ints, ids))
    end = draw(st.one_of(ints, st.just([v + 1 for v in a] if all(
        type(v) is int for v in a) else list(a))))
    return {"a": a, "b": b, "end": end, "tie_break": draw(keys)}, num_rows


def sorted_by_type(values: list[Any]) -> list[Any]:
    """Runs of equal values (grouped by their text)."""
    return sorted(values, key=lambda value: json.dumps(value))


@settings(max_examples=300, deadline=None)
@given(_tables())
def test_a_table_decodes_to_its_exact_columns(table: tuple[dict[str, list[Any]], int]) -> None:
    columns, num_rows = table
    encoded = json.loads(dumps(encode_table(columns, NAMES, num_rows, HINTS)))
    decoded = decode_table(encoded, NAMES)
    assert dumps(decoded) == dumps(columns)  # the canonical text: types and -0.0 included


def test_the_compact_forms_are_chosen_and_never_merge_types() -> None:
    columns = {"a": [5, 6, 7, 9], "b": [5, 6, 7, 9], "end": [6, 7, 8, 10],
               "tie_break": [[0, 5], [0, 6], [0, 7], [0, 9]]}
    table = encode_table(columns, NAMES, 4, HINTS)
    assert table["b"] == {"same": "a"} and table["end"] == {"plus": ["a", {"runs": [1, 4]}]}
    assert table["tie_break"] == {"keys": [{"runs": [0, 4]}, {"same": "a"}]}
    ids = {"a": ["r000900", "r000903", "r001071", "r001072"], "b": ["r1", "r01", "r2", "r3"],
           "end": [1, 1, 1, 1], "tie_break": [[], [], [], []]}
    table = encode_table(ids, NAMES, 4, HINTS)
    assert table["a"] == {"numbered": ["r00", 4, {"steps": [900, 3, 168, 1]}]}
    assert list(table["b"]) == ["r1", "r01", "r2", "r3"]  # not one width: as they are
    assert dumps(decode_table(json.loads(dumps(table)), NAMES)) == dumps(ids)
    mixed = {"a": [1, 1, 1, 1], "b": [True, True, True, True], "end": [1.0, 1.0, 1.0, 1.0],
             "tie_break": [[], [], [], []]}
    table = encode_table(mixed, NAMES, 4, HINTS)
    assert table["b"] == {"runs": [True, 4]} and list(table["end"]) == [1.0, 1.0, 1.0, 1.0]
    assert dumps(decode_table(json.loads(dumps(table)), NAMES)) == dumps(mixed)


@pytest.mark.parametrize(("edit", "words"), [
    (lambda t: t.pop("rows"), "rows must be an integer"),
    (lambda t: t.update(b={"same": "end"}), "b: same names no column decoded before it"),
    (lambda t: t.update(a={"runs": [1, 0]}), "a: runs: a count must be an integer >= 1"),
    (lambda t: t.update(a={"steps": [1, "2"]}), "a: steps must be"),
    (lambda t: t.update(a={"zip": []}), "a: must be an array or an object with one of"),
    (lambda t: t.update(a={"numbered": ["r", 2, [5, 100, 7, 9]]}),
     "a: numbered: every number must be an integer of at most 2 digits"),
    (lambda t: t.update(a={"numbered": ["r", 0, [5, 6, 7, 9]]}), "a: numbered must be"),
    (lambda t: t.update(a=[1, 2]), "a: 2 values, rows is 4"),
    (lambda t: t.update(extra=[]), "extra is not a field"),
])
def test_a_malformed_table_is_named(edit: Any, words: str) -> None:
    table = json.loads(dumps(encode_table({"a": [5, 6, 7, 9], "b": [5, 6, 7, 9],
                                           "end": [6, 7, 8, 10],
                                           "tie_break": [[0], [0], [0], [0]]}, NAMES, 4, HINTS)))
    edit(table)
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        decode_table(table, NAMES)


# --- a run's log -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def workload_path(tmp_path_factory) -> Path:
    workload = random_workload_json(seed=2024, num_requests=12)
    workload["clock"] = "ms"
    workload["kv"] = {"num_kv_blocks": 12, "block_size": 2}  # preemptions
    return write_json(tmp_path_factory.mktemp("format6") / "workload.json", workload)


def _simulate(workload: Path, log: Path, *flags: str) -> Path:
    assert main(["simulate", "--no-plots", "--workload", str(workload), "--policy", "vllm",
                 "--cost-model", COST_MODEL, "--out", str(log.parent / f"{log.name}.out"),
                 "--decision-log", str(log), *flags]) == 0
    return log


@pytest.fixture(scope="module")
def logs(workload_path, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("logs")
    return {"text": _simulate(workload_path, out / "decisions.jsonl"),
            "zst": _simulate(workload_path, out / "decisions.jsonl.zst"),
            "zst-in-process": _simulate(workload_path, out / "in-process.jsonl.zst",
                                        "--log-process", "off")}


def _replay(path: Path, workload: Path | None, capsys) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["replay", str(path)] + ([] if workload is None else ["--workload", str(workload)]))
    return rc, capsys.readouterr().err


def test_the_log_replays_and_round_trips_through_format_5(logs, workload_path, tmp_path,
                                                          capsys) -> None:
    data = logs["text"].read_bytes()
    assert json.loads(data.splitlines()[0])["format"] == 6
    assert b'"rows":' in data and b'"same":"work.request_id"' in data  # tables written
    for workload in (None, workload_path):
        assert _replay(logs["text"], workload, capsys) == (0, "")
    format_5 = as_format(data, 5)
    assert b'"rows":' not in format_5
    (tmp_path / "format5.jsonl").write_bytes(format_5)
    assert _replay(tmp_path / "format5.jsonl", workload_path, capsys) == (0, "")
    assert as_format(format_5, 6) == data
    # the reader's rows are format 5's rows, item for item
    rows_6 = [line.record for line in read_log(logs["text"]).body]
    rows_5 = [line.record for line in read_log(tmp_path / "format5.jsonl").body]
    assert [line.get("plan") for line in rows_6] == [line.get("plan") for line in rows_5]
    assert [line.get("result") for line in rows_6] == [line.get("result") for line in rows_5]


def test_a_zst_log_is_the_same_text_compressed_and_replays(logs, workload_path,
                                                           capsys) -> None:
    text = logs["text"].read_bytes()
    for name in ("zst", "zst-in-process"):
        data = logs[name].read_bytes()
        assert data[:4] == b"\x28\xb5\x2f\xfd" and len(data) < len(text) / 3
        assert decompressed(data, 1 << 30) == text
        for workload in (None, workload_path):
            assert _replay(logs[name], workload, capsys) == (0, "")


def _edited(lines: list[dict[str, Any]], index: int) -> bytes:
    lines[index]["result"]["completed"][-1]["token_id"] += 1
    return "".join(json.dumps(as_columns(line)) + "\n" for line in lines).encode()


@pytest.mark.parametrize("compressed", [False, True], ids=["text", "zst"])
@pytest.mark.parametrize("with_workload", [True, False], ids=["workload", "chain-only"])
def test_an_edited_line_is_named_in_either_file(logs, workload_path, compressed, with_workload,
                                                tmp_path, capsys) -> None:
    lines = row_lines(logs["text"])
    index = [i for i, line in enumerate(lines) if line["type"] == "iteration"][-3]
    data = _edited(lines, index)
    path = tmp_path / ("edited.jsonl.zst" if compressed else "edited.jsonl")
    path.write_bytes(zstandard.ZstdCompressor().compress(data) if compressed else data)
    rc, err = _replay(path, workload_path if with_workload else None, capsys)
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"line {index + 1}, decision {lines[index]['decision_id']}:" in err, err
    assert ("result differs at result.completed[" if with_workload
            else "chain does not match") in err, err


def test_a_cut_compressed_log_is_one_line(logs, tmp_path, capsys) -> None:
    path = tmp_path / "cut.jsonl.zst"
    path.write_bytes(logs["zst"].read_bytes()[:-7])
    rc, err = _replay(path, None, capsys)
    assert rc == 2 and err.count("\n") == 1 and "zstd: not a whole zstd stream" in err, err
    with pytest.raises(MalformedLog, match="cut short"):
        read_log(path)


def test_a_malformed_table_in_a_log_names_line_and_field(logs, tmp_path, capsys) -> None:
    lines = [json.loads(text) for text in logs["text"].read_text().splitlines()]
    index = next(i for i, line in enumerate(lines) if line["type"] == "iteration"
                 and line["result"]["completed"]["rows"])
    lines[index]["result"]["completed"]["start"] = {"same": "work.kind"}
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    rc, err = _replay(path, None, capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert f"line {index + 1} (iteration): result.completed: start: same names no column" in err


# --- bytes per line: the decisions, not the waiting queue ------------------------------------
def _queued_workload(num_requests: int) -> dict[str, Any]:
    """Every request arrives at once with the same lengths; two run at a
    time, so all others wait: the first decisions are the same for any
    ``num_requests`` above a few, only the waiting queue differs."""
    ids = [f"q{i:05d}" for i in range(num_requests)]
    return {
        "workload_id": "queued", "clock": "ms",
        "capacity": {"max_num_batched_tokens": 64, "max_num_seqs": 2},
        "kv": {"num_kv_blocks": 64, "block_size": 4},
        "requests": [{"request_id": rid, "arrival": 0, "prompt_tokens": 12,
                      "max_output_tokens": 6, "client_id": "c"} for rid in ids],
        "fixture_only_hidden_truth": {"realized_output_tokens": dict.fromkeys(ids, 6)},
    }


def test_line_bytes_do_not_grow_with_the_waiting_queue(tmp_path) -> None:
    line_bytes = {}
    for num_requests in (40, 400):
        workload = write_json(tmp_path / f"w{num_requests}.json", _queued_workload(num_requests))
        log = _simulate(workload, tmp_path / f"log{num_requests}.jsonl")
        line_bytes[num_requests] = [len(text) for text in log.read_bytes().splitlines()[1:]]
    few, many = line_bytes[40], line_bytes[400]
    num_compared = len(few) - 5  # the 40-request run's last lines: its queue ran dry
    assert num_compared > 50
    assert few[:num_compared] == many[:num_compared]  # 36 waiting against 396: the same bytes
