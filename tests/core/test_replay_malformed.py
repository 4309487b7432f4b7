"""Malformed decision logs (issue 14 parts 2 and 3): every row is one line
on stderr naming the line (and field), exit 2, never a traceback."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from iterserve.cli.main import main
from log_rows import as_format

from .helpers import REPO_ROOT, random_workload_json, write_json

BURST = REPO_ROOT / "examples" / "burst_0x07.json"


@pytest.fixture(scope="module")
def base_lines(tmp_path_factory) -> list[str]:
    """A gated, stopped-early run: iteration lines, rejections and a summary."""
    tmp = tmp_path_factory.mktemp("malformed")
    workload = write_json(tmp / "w.json", random_workload_json(seed=2024, num_requests=12))
    log = tmp / "log.jsonl"
    assert main(["simulate", "--no-plots", "--workload", str(workload), "--policy", "refill",
                 "--overload", "bounded", "--max-live", "3", "--max-iterations", "8",
                 "--out", str(tmp / "out"), "--decision-log", str(log)]) == 0
    # format 5's arrays, which the cases below edit (format 6's tables: test_log_format_6.py)
    lines = as_format(log.read_bytes(), 5).decode().splitlines()
    assert json.loads(lines[-1])["type"] == "summary"
    return lines


Edit = Callable[[list[str]], bytes]


def _lines(edit: Callable[[list[dict]], None]) -> Edit:
    """Edit the parsed lines, write them back as JSON."""
    def apply(raw: list[str]) -> bytes:
        lines = [json.loads(text) for text in raw]
        edit(lines)
        return "".join(json.dumps(line) + "\n" for line in lines).encode()
    return apply


def _raw(index: int, text: str | bytes) -> Edit:
    """Replace line ``index`` (0-based) with raw text."""
    def apply(raw: list[str]) -> bytes:
        out = [line.encode() for line in raw]
        out[index] = text if isinstance(text, bytes) else text.encode()
        return b"\n".join(out) + b"\n"
    return apply


def _set(index: int, path: str, value: object) -> Edit:
    """Set a dotted field (list indexes as numbers) on line ``index``."""
    def edit(lines: list[dict]) -> None:
        *parents, last = path.split(".")
        obj: object = lines[index]
        for key in parents:
            obj = obj[int(key)] if isinstance(obj, list) else obj[key]  # type: ignore[index]
        if value is _DELETE:
            del obj[last]  # type: ignore[union-attr]
        else:
            obj[int(last) if isinstance(obj, list) else last] = value  # type: ignore[index]
    return _lines(edit)


_DELETE = object()

# name -> (edit, the 1-based line it must name (-1: the last), words the message must hold)
CASES: dict[str, tuple[Edit, int, str]] = {
    "empty-file": (lambda raw: b"", 1, "missing decision-log header"),
    "header-missing": (lambda raw: ("\n".join(raw[1:]) + "\n").encode(), 1, "header"),
    "array-line": (_raw(2, "[1, 2, 3]"), 3, "must be a JSON object, got an array"),
    "string-line": (_raw(2, '"iteration"'), 3, "got a string"),
    "number-line": (_raw(2, "42"), 3, "got an integer"),
    "null-line": (_raw(2, "null"), 3, "got null"),
    "array-header": (_raw(0, "[]"), 1, "must be a JSON object"),
    "truncated-line": (lambda raw: _raw(3, raw[3][: len(raw[3]) // 2])(raw), 4, "not valid JSON"),
    "truncated-file": (lambda raw: ("\n".join(raw)[:-40]).encode(), -1, "not valid JSON"),
    "not-utf8": (_raw(2, b'{"type": "\xff\xfe"}'), 3, "not UTF-8"),
    "nan-duration": (lambda raw: _raw(2, raw[2].replace('"duration":1.0', '"duration":NaN'))(raw),
                     3, "NaN"),
    "deep-nesting": (_raw(2, "[" * 100_000 + "]" * 100_000), 3, "not valid JSON"),
    "format-unknown": (_set(0, "format", 99), 1, "unsupported log format 99"),
    "format-string": (_set(0, "format", "3"), 1, "unsupported log format"),
    "format-missing": (_set(0, "format", _DELETE), 1, "unsupported log format"),
    "header-policy-missing": (_set(0, "policy", _DELETE), 1, "policy missing"),
    "header-policy-id-int": (_set(0, "policy.id", 7), 1, "id must be a string"),
    "header-policy-unknown": (_set(0, "policy.id", "fifo"), 1, "unknown policy"),
    "header-policy-version": (_set(0, "policy.version", "9"), 1, "installed version is"),
    "header-capacity-type": (_set(0, "initial_capacity", [1]), 1, "initial_capacity must be"),
    "header-capacity-field": (_set(0, "initial_capacity.block_size", "16"), 1, "block_size"),
    "header-workload-type": (_set(0, "workload", "w.json"), 1, "workload must be an object"),
    "header-workload-bad": (_set(0, "workload.clock", "fortnight"), 1, "clock"),
    "header-executor": (_set(0, "executor", "gpu"), 1, "executor must be one of"),
    "header-chain-missing": (_set(0, "chain", _DELETE), 1, "chain missing"),
    "header-gate-params": (_set(0, "gate.params", [3]), 1, "params must be an object"),
    "header-cost-model-type": (_set(0, "cost_model", 10), 1, "cost_model must be"),
    "header-digest": (_set(0, "output_lengths_sha256", "abc"), 1, "output_lengths_sha256"),
    "unknown-type": (_set(2, "type", "bogus"), 3, "unknown line type"),
    "type-missing": (_set(2, "type", _DELETE), 3, "unknown line type"),
    "decision-id-string": (_set(2, "decision_id", "1"), 3, "decision_id must be an integer"),
    "decision-id-negative": (_set(2, "decision_id", -1), 3, "decision_id"),
    "state-version-float": (_set(2, "state_version", 1.5), 3, "state_version must be"),
    "state-digest-short": (_set(2, "state_digest", "abc"), 3, "state_digest"),
    "policy-not-object": (_set(2, "policy", "refill"), 3, "policy must be an object"),
    "plan-not-object": (_set(2, "plan", []), 3, "plan must be an object"),
    "result-missing": (_set(2, "result", _DELETE), 3, "result missing"),
    "result-completed-missing": (_set(2, "result.completed", _DELETE), 3, "completed missing"),
    # format 5: completions (and work) as columns, one array per field
    "result-completed-rows": (_set(2, "result.completed", []), 3, "completed must be an object"),
    "result-column-not-array": (_set(2, "result.completed.start", 5), 3,
                                "result.completed: start must be an array"),
    "result-column-missing": (_set(2, "result.completed.token_id", _DELETE), 3,
                              "result.completed: token_id missing"),
    "result-column-unknown": (_set(2, "result.completed.block_ids", []), 3,
                              "result.completed: block_ids is not a field"),
    "result-columns-lengths": (_set(2, "result.completed.end", []), 3, "differ in length"),
    "plan-work-rows": (_set(2, "plan.work", []), 3, "plan: work must be an object"),
    "plan-columns-lengths": (_set(2, "plan.work.kind", []), 3, "plan.work: the arrays differ"),
    "result-start-string": (_set(2, "result.completed.start.0", "a"), 3,
                            "completed[0]: start must be"),
    "result-emitted-int": (_set(2, "result.completed.emitted.0", 1), 3, "emitted"),
    "result-finish-reason": (_set(2, "result.completed.finish_reason.0", "exploded"), 3,
                             "finish_reason"),
    "result-token-id-float": (_set(2, "result.completed.token_id.0", 1.5), 3, "token_id"),
    "result-duration-string": (_set(2, "result.duration", "1s"), 3, "duration"),
    "result-duration-huge": (_set(2, "result.duration", 10**400), 3, "duration"),
    "result-service-string": (_set(2, "result.service", {"client-a": "3"}), 3, "service"),
    "result-failures-item": (_set(2, "result.failures", [{"request_id": "r00"}]), 3,
                             "failures[0]"),
    "result-capacity-type": (_set(2, "result.capacity", 12), 3, "capacity"),
    "result-unknown-field": (_set(2, "result.block_ids", [1]), 3, "unknown field 'block_ids'"),
    "line-unknown-field": (_set(2, "note", "hi"), 3, "unknown field 'note'"),
    "rejected-not-list": (_set(2, "rejected", "r01"), 3, "rejected"),
    "rejected-bad-item": (_set(2, "rejected", [["r01"]]), 3, "rejected"),
    "chain-missing": (_set(2, "chain", _DELETE), 3, "chain missing"),
    "chain-not-hex": (_set(2, "chain", "z" * 64), 3, "chain must be a sha256"),
    "summary-is-done-string": (_set(-1, "is_done", "yes"), -1, "is_done must be a boolean"),
    "summary-version-missing": (_set(-1, "state_version", _DELETE), -1, "state_version missing"),
    "summary-is-done-flipped": (_set(-1, "is_done", True), -1, "summary says is_done"),
    "summary-wrong-decision": (_set(-1, "decision_id", 0), -1, "summary at decision 0"),
    "summary-early-version": (_set(-1, "state_version", 0), -1, "at state_version 0"),
    "summary-late-version": (_set(-1, "state_version", 10**9), -1, "has a summary line"),
}


def _line_number(raw: list[str], number: int) -> int:
    """1-based; -1 is the last line."""
    return number if number > 0 else len(raw)


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_log_is_one_line_naming_the_line(base_lines, name, tmp_path, capsys):
    edit, line, words = CASES[name]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(edit(base_lines))
    before = sorted(tmp_path.iterdir())
    capsys.readouterr()
    assert main(["replay", str(path)]) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("iterserve replay: error: "), err
    number = _line_number(base_lines, line)
    assert f"line {number}" in err and words in err, err
    assert captured.out == "" and sorted(tmp_path.iterdir()) == before


@pytest.mark.parametrize("target", ["directory", "missing"])
def test_a_path_that_is_no_log_is_one_line(tmp_path, target, capsys):
    path = tmp_path if target == "directory" else tmp_path / "no-such.jsonl"
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and str(path) in err, err


@pytest.mark.parametrize(("target", "words"), [("not-json", "not valid JSON"),
                                               ("directory", "is a directory"),
                                               ("missing", "no such file")])
def test_replay_with_a_bad_workload_file_is_one_line(base_lines, target, words, tmp_path,
                                                     capsys):
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(base_lines) + "\n")
    workload = tmp_path / target
    if target == "not-json":
        workload.write_text("{not json")
    elif target == "directory":
        workload.mkdir()
    assert main(["replay", str(log), "--workload", str(workload)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and words in err, err


# --- any one-field edit is refused in one line ----------------------------------------
FUZZ_VALUES = [None, True, -1, 0, 1.5, "x", [], {}, [1], {"a": 1}, 10**30, "fixed:10"]


def _field_paths(obj: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for key, value in obj.items():
            out += _field_paths(value, prefix + (key,))
    elif isinstance(obj, list):
        for i, value in enumerate(obj[:2]):
            out += _field_paths(value, prefix + (i,))
    return out


@pytest.fixture(scope="module")
def gated_log(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("fuzz")
    log = tmp / "log.jsonl"
    assert main(["simulate", "--no-plots", "--workload", str(BURST),
                 "--policy", "least-slack", "--cost-model", "fixed:10", "--overload", "bounded",
                 "--max-live", "4", "--out", str(tmp / "out"), "--decision-log", str(log)]) == 0
    return [json.loads(text) for text in log.read_text().splitlines()]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), with_workload=st.booleans())
def test_any_one_field_edit_is_refused_in_one_line(gated_log, data, with_workload, tmp_path,
                                                   capsys):
    """Every field of every line except the header's workload (the workload
    loader's own validation covers it): any other value is exit 2, one line."""
    lines = copy.deepcopy(gated_log)
    index = data.draw(st.integers(0, len(lines) - 1), label="line")
    paths = [p for p in _field_paths(lines[index]) if p[0] != "workload"]
    path = data.draw(st.sampled_from(paths), label="field")
    value = data.draw(st.sampled_from(FUZZ_VALUES), label="value")
    parent = lines[index]
    for key in path[:-1]:
        parent = parent[key]
    assume(json.dumps(parent[path[-1]]) != json.dumps(value))
    parent[path[-1]] = value
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(json.dumps(line) + "\n" for line in lines))
    extra = ["--workload", str(BURST)] if with_workload else []
    capsys.readouterr()
    assert main(["replay", str(edited), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "line " in err, err
