"""Reading a decision log: every line parsed and shape-checked as it is read.

A malformed line (not UTF-8, not JSON, not an object, a missing or
mistyped field, an unknown line type, an unreadable format) is one
:class:`MalformedLog` error naming its line number and field; replay then
only meets well-typed lines. The header's unknown keys are tolerated (a
later format may add one; the chain still covers them); a body line's are
not. Plans are not shape-checked here: replay compares them with the
re-derived plan and names the first difference. A format-6 line's tables
are decoded into rows here (a table that is not one is malformed, named by
line and field); a zstd-compressed file is told by its first bytes.

:func:`open_log` streams: the file is read a piece at a time (decompressed
as it comes) and each body line is parsed and checked when the reader
reaches it, so a reader holds the lines it keeps, never the log. A
malformed line is named when it is reached (replay meets it before any
line after it). :func:`read_log` reads every line into a tuple, for the
callers that want them all.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Generator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iterserve.engine.decision_log import (
    CHAIN_KEY,
    COLUMNAR_FORMATS,
    EXECUTORS,
    READABLE_FORMATS,
    TABLE_FORMATS,
)
from iterserve.records.codec import (
    COMPLETED_COLUMNS,
    WORK_COLUMNS,
    columns_of_tables,
    rows_of_columns,
)
from iterserve.records.compressed_text import (
    CompressedStreamError,
    decompressed_chunks,
    is_compressed,
)
from iterserve.records.input_files import MAX_LOG_BYTES, read_input_chunks
from iterserve.records.jsonl import json_kind, parse_lines, split_lines
from iterserve.records.receipts import ForeignStatus
from iterserve.records.view import FinishReason

MAX_LINE_BYTES = 64 * 1024 * 1024


class ReplayDivergence(RuntimeError):
    """The log and the re-derivation disagree; the message names where."""


class MalformedLog(ReplayDivergence):
    """A log line cannot be read; the message names the line and field."""


@dataclass(frozen=True, slots=True)
class LogLine:
    """One parsed line and its 1-based line number in the file. ``fields``:
    as written (the chain covers them); ``rows``: the same line with an
    iteration's work and completions as one object per item, as format 4
    wrote them (None: ``fields`` already are; see :attr:`record`)."""

    number: int
    fields: Mapping[str, Any]
    rows: Mapping[str, Any] | None = None

    @property
    def record(self) -> Mapping[str, Any]:
        """The line with the work and the completions as row objects."""
        return self.fields if self.rows is None else self.rows

    @property
    def kind(self) -> str:
        return str(self.fields["type"])

    @property
    def where(self) -> str:
        """``line N, decision D`` (``line 1, header`` for the header)."""
        if self.kind == "header":
            return f"line {self.number}, header"
        return f"line {self.number}, decision {self.fields['decision_id']}"


@dataclass(frozen=True, slots=True)
class DecisionLogFile:
    """A log's checked header and its body lines in file order: a tuple
    from :func:`read_log`, a one-pass iterator from :func:`open_log`."""

    header: LogLine
    body: Iterable[LogLine]

    @property
    def format(self) -> int:
        return int(self.header.fields["format"])

    @property
    def has_chain(self) -> bool:
        return self.format >= 3


def read_log(path: Path) -> DecisionLogFile:
    """The decision log at ``path`` with every body line in a tuple, checked
    line by line; a :class:`MalformedLog` names the file, then the line and
    field. It holds the whole log: replay streams it (:func:`open_log`)."""
    with open_log(path) as log:
        return DecisionLogFile(log.header, tuple(log.body))


@contextmanager
def open_log(path: Path) -> Iterator[DecisionLogFile]:
    """The decision log at ``path``, its header read and checked, its body
    an iterator that reads, parses and checks one line at a time; a
    :class:`MalformedLog` (from here or from the iterator) names the file,
    then the line and field. The file is closed on leaving the block."""
    lines = _checked_lines(Path(path))
    try:
        yield DecisionLogFile(next(lines), lines)
    finally:
        lines.close()


def _checked_lines(path: Path) -> Generator[LogLine, None, None]:
    try:
        yield from _checked_lines_of(path)
    except MalformedLog as exc:
        raise MalformedLog(f"{path}: {exc}") from None


def _checked_lines_of(path: Path) -> Iterator[LogLine]:
    """The header (first, checked), then each body line checked against its
    format, each when the reader asks for it."""
    lines = _parsed_lines(path)
    header = next(lines, None)
    if header is None or header.fields.get("type") != "header":
        raise MalformedLog(f"line {1 if header is None else header.number}: "
                           "missing decision-log header")
    _check_header(header)
    yield header
    log_format = header.fields["format"]
    is_columnar, is_table = log_format in COLUMNAR_FORMATS, log_format in TABLE_FORMATS
    for line in lines:
        checked = _with_rows(line, is_table) if is_columnar else line
        _check_body_line(checked, log_format >= 3)
        yield checked


def _with_rows(line: LogLine, is_table: bool = False) -> LogLine:
    """An iteration line of a columnar format with its :attr:`LogLine.rows`
    (its other lines need none); ``is_table``: its columns are format 6's
    tables (:func:`~iterserve.records.codec.columns_of_tables`)."""
    obj = line.fields
    if obj.get("type") != "iteration":
        return line
    where = f"line {line.number} (iteration)"
    plan = _require(obj, "plan", "object", where)
    result = _require(obj, "result", "object", where)
    work = _require(plan, "work", "object", f"{where}: plan")
    completed = _require(result, "completed", "object", f"{where}: result")
    if is_table:
        try:
            work, completed = columns_of_tables(work, completed)
        except ValueError as exc:
            part = "plan" if str(exc).startswith("work") else "result"
            raise MalformedLog(f"{where}: {part}.{exc}") from None
    rows = dict(obj)
    for part, doc, key, columns, names in (("plan", plan, "work", work, WORK_COLUMNS),
                                           ("result", result, "completed", completed,
                                            COMPLETED_COLUMNS)):
        try:
            rows[part] = {**doc, key: rows_of_columns(columns, names)}
        except ValueError as exc:
            raise MalformedLog(f"{where}: {part}.{key}: {exc}") from None
    return LogLine(line.number, obj, rows)


def _parsed_lines(path: Path) -> Iterator[LogLine]:
    pieces = read_input_chunks(path, MalformedLog, MAX_LOG_BYTES, named=False)
    first = next(pieces, b"")
    pieces = itertools.chain([first], pieces)
    if is_compressed(first):  # told by its first bytes: a renamed file reads the same
        pieces = _decompressed(pieces)
    for number, obj in parse_lines(split_lines(pieces, MAX_LINE_BYTES), MalformedLog,
                                   where=lambda number: f"line {number}",
                                   strict_numbers=True, max_line_bytes=MAX_LINE_BYTES):
        yield LogLine(number, obj)


def _decompressed(pieces: Iterator[bytes]) -> Iterator[bytes]:
    try:
        yield from decompressed_chunks(pieces, MAX_LOG_BYTES)
    except CompressedStreamError as exc:
        raise MalformedLog(f"zstd: {exc}") from None


# --- field checks -------------------------------------------------------------------------
def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


_CHECKS = {
    "int": (_is_int, "an integer"),
    "int?": (lambda v: v is None or _is_int(v), "an integer or null"),
    "int>=0": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "number": (_is_number, "a finite number"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "str?": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "bool": (lambda v: isinstance(v, bool), "a boolean"),
    "object": (lambda v: isinstance(v, dict), "an object"),
    "object?": (lambda v: v is None or isinstance(v, dict), "an object or null"),
    "list": (lambda v: isinstance(v, list), "an array"),
    "sha256": (lambda v: isinstance(v, str) and len(v) == 64
               and all(c in "0123456789abcdef" for c in v), "a sha256 hex digest"),
}


def _require(obj: Mapping[str, Any], name: str, check: str, where: str) -> Any:
    if name not in obj:
        raise MalformedLog(f"{where}: {name} missing")
    is_valid, expected = _CHECKS[check]
    if not is_valid(obj[name]):
        raise MalformedLog(f"{where}: {name} must be {expected}, got {_brief(obj[name])}")
    return obj[name]


def _brief(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else "inf"
    return text if len(text) <= 40 else f"{json_kind(value)} ({text[:30]}...)"


def _exact_keys(obj: Mapping[str, Any], required: set[str], optional: set[str],
                where: str) -> None:
    missing = sorted(required - set(obj))
    if missing:
        raise MalformedLog(f"{where}: {missing[0]} missing")
    unknown = sorted(set(obj) - required - optional)
    if unknown:
        raise MalformedLog(f"{where}: unknown field {unknown[0]!r}")


# --- the header ---------------------------------------------------------------------------
def _check_header(line: LogLine) -> None:
    obj, where = line.fields, f"line {line.number}, header"
    log_format = obj.get("format")
    if not _is_int(log_format) or log_format not in READABLE_FORMATS:
        raise MalformedLog(f"{where}: unsupported log format {_brief(log_format)} "
                           f"(readable: {', '.join(map(str, READABLE_FORMATS))})")
    _check_policy(_require(obj, "policy", "object", where), f"{where}: policy")
    _check_capacity(_require(obj, "initial_capacity", "object", where),
                    f"{where}: initial_capacity")
    _require(obj, "workload", "object", where)
    if obj.get("policy_settings") is not None:
        _require(obj, "policy_settings", "object", where)
    if log_format >= 2:
        _require(obj, "cost_model", "str?", where)
        gate = _require(obj, "gate", "object?", where)
        if gate is not None:
            _require(gate, "id", "str", f"{where}: gate")
            _require(gate, "params", "object", f"{where}: gate")
    if log_format >= 3:
        if _require(obj, "executor", "str", where) not in EXECUTORS:
            raise MalformedLog(f"{where}: executor must be one of {list(EXECUTORS)}, "
                               f"got {_brief(obj['executor'])}")
        if obj.get("output_lengths_sha256") is not None:
            _require(obj, "output_lengths_sha256", "sha256", where)
        _require(obj, CHAIN_KEY, "sha256", where)


def _check_policy(obj: Mapping[str, Any], where: str) -> None:
    _exact_keys(obj, {"id", "version"}, set(), where)
    _require(obj, "id", "str", where)
    _require(obj, "version", "str", where)


def _check_capacity(obj: Mapping[str, Any], where: str) -> None:
    _exact_keys(obj, {"block_size", "num_blocks_total", "num_blocks_free"},
                {"releases_at_once", "num_blocks_pending_release"}, where)
    _require(obj, "block_size", "int", where)
    _require(obj, "num_blocks_total", "int?", where)
    _require(obj, "num_blocks_free", "int?", where)
    if "releases_at_once" in obj:
        _require(obj, "releases_at_once", "bool", where)
    if "num_blocks_pending_release" in obj:
        _require(obj, "num_blocks_pending_release", "int>=0", where)


# --- body lines ---------------------------------------------------------------------------
_BODY_KEYS = {
    "iteration": {"type", "decision_id", "state_version", "state_digest", "policy", "plan",
                  "result"},
    "cancel": {"type", "decision_id", "state_version", "request_id"},
    "summary": {"type", "decision_id", "state_version", "is_done"},
    # requests an online engine took in between two steps (engine/online_log.py)
    "arrival": {"type", "decision_id", "state_version", "requests"},
}


def _check_body_line(line: LogLine, chained: bool) -> None:
    obj = line.fields
    kind = obj.get("type")
    if not isinstance(kind, str) or kind not in _BODY_KEYS:
        raise MalformedLog(f"line {line.number}: unknown line type {_brief(kind)} "
                           f"(expected one of {sorted(_BODY_KEYS)})")
    where = f"line {line.number} ({kind})"
    required = _BODY_KEYS[kind] | ({CHAIN_KEY} if chained else set())
    optional = {"cancel": {"rejected", "capacity"}, "iteration": {"rejected", "prefix_hits", "claimed_prefix_rows",
                                                                      "reclaimed_prefix_blocks"}}
    _exact_keys(obj, required, optional.get(kind, {"rejected"}), where)
    _require(obj, "decision_id", "int>=0", where)
    _require(obj, "state_version", "int>=0", where)
    if chained:
        _require(obj, CHAIN_KEY, "sha256", where)
    if "rejected" in obj:
        _check_rejected(obj["rejected"], f"{where}: rejected")
    if kind == "iteration":
        _require(obj, "state_digest", "sha256", where)
        _check_policy(_require(obj, "policy", "object", where), f"{where}: policy")
        _require(obj, "plan", "object", where)
        _check_result(_require(line.record, "result", "object", where), f"{where}: result")
        claimed = "claimed_prefix_rows"
        hits = _require(obj, claimed, "object", where) if claimed in obj else {}
        for rid in hits:
            _require(hits, rid, "int>=0", f"{where}: claimed_prefix_rows")
        if "reclaimed_prefix_blocks" in obj:
            _check_prefix_hits(obj["reclaimed_prefix_blocks"], f"{where}: reclaimed_prefix_blocks",
                               "blocks")
        if "prefix_hits" in obj:
            _check_prefix_hits(obj["prefix_hits"], f"{where}: prefix_hits")
    elif kind == "arrival":
        _require(obj, "requests", "list", where)  # each request is checked as a workload's
    elif kind == "cancel":
        _require(obj, "request_id", "str", where)
        if "capacity" in obj:
            _check_capacity(_require(obj, "capacity", "object", where), f"{where}: capacity")
    else:
        _require(obj, "is_done", "bool", where)


def _check_prefix_hits(value: Any, where: str, what: str = "cached rows") -> None:
    """The memory owner's prefix-hit facts a decision read: {request_id: rows >= 1}
    (or blocks >= 1: ``what``)."""
    ok = isinstance(value, dict) and all(
        isinstance(rows, int) and not isinstance(rows, bool) and rows >= 1
        for rows in value.values())
    if not ok:
        raise MalformedLog(f"{where}: must be an object of request_id: {what} >= 1")


def _check_rejected(value: Any, where: str) -> None:
    ok = isinstance(value, list) and all(
        isinstance(item, list) and len(item) == 2 and all(isinstance(s, str) for s in item)
        for item in value)
    if not ok:
        raise MalformedLog(f"{where}: must be an array of [request_id, reason] strings")


_RESULT_KEYS = {"decision_id", "input_state_version", "completed", "failures", "service",
                "duration", "capacity", "receipts", "releases"}
# format 1 may omit the first four; receipts appear only when a preservation
# does not complete in its intent's iteration, releases only when one is not
# READY in its intent's iteration (0x0C)
_RESULT_OPTIONAL = {"failures", "service", "duration", "capacity", "receipts", "releases"}
_COMPLETED = {"request_id": "str", "generation": "int>=0", "start": "int>=0", "end": "int>=0",
              "emitted": "bool", "token_id": "int?", "finish_reason": "str?"}
_FAILURE = {"request_id": "str", "generation": "int>=0", "reason": "str"}
_RECEIPT = {"request_id": "str", "generation": "int>=0", "snapshot_digest": "str",
            "suspension_epoch": "int>=0", "status": "str", "exact_ready_prefix_tokens": "int>=0"}
_RELEASE = {"request_id": "str", "generation": "int>=0", "snapshot_digest": "str",
            "suspension_epoch": "int>=0", "status": "str", "reclaimed_bytes": "int>=0"}
_RECEIPT_STATUSES = {status.value for status in ForeignStatus}
_FINISH_REASONS = {reason.value for reason in FinishReason}


def _check_result(obj: Mapping[str, Any], where: str) -> None:
    _exact_keys(obj, _RESULT_KEYS - _RESULT_OPTIONAL, _RESULT_OPTIONAL, where)
    _require(obj, "decision_id", "int>=0", where)
    _require(obj, "input_state_version", "int>=0", where)
    for i, item in enumerate(_require(obj, "completed", "list", where)):
        _check_record(item, _COMPLETED, f"{where}.completed[{i}]")
        if item["finish_reason"] is not None and item["finish_reason"] not in _FINISH_REASONS:
            raise MalformedLog(f"{where}.completed[{i}]: finish_reason must be one of "
                               f"{sorted(_FINISH_REASONS)} or null")
    for i, item in enumerate(_require(obj, "failures", "list", where) if "failures" in obj else ()):
        _check_record(item, _FAILURE, f"{where}.failures[{i}]")
    for i, item in enumerate(_require(obj, "receipts", "list", where) if "receipts" in obj else ()):
        _check_record(item, _RECEIPT, f"{where}.receipts[{i}]")
        if item["status"] not in _RECEIPT_STATUSES:
            raise MalformedLog(f"{where}.receipts[{i}]: status must be one of "
                               f"{sorted(_RECEIPT_STATUSES)}")
    for i, item in enumerate(_require(obj, "releases", "list", where) if "releases" in obj else ()):
        _check_record(item, _RELEASE, f"{where}.releases[{i}]")
        if item["status"] not in _RECEIPT_STATUSES:
            raise MalformedLog(f"{where}.releases[{i}]: status must be one of "
                               f"{sorted(_RECEIPT_STATUSES)}")
    service = _require(obj, "service", "object", where) if "service" in obj else {}
    for client in service:
        _require(service, client, "int", f"{where}.service")
    if "duration" in obj:
        _require(obj, "duration", "number", where)
    if obj.get("capacity") is not None:
        _check_capacity(_require(obj, "capacity", "object", where), f"{where}.capacity")


def _check_record(item: Any, fields: Mapping[str, str], where: str) -> None:
    if not isinstance(item, dict):
        raise MalformedLog(f"{where}: must be an object, got {json_kind(item)}")
    _exact_keys(item, set(fields), set(), where)
    for name, check in fields.items():
        _require(item, name, check, where)
