"""Trace readers: the project's JSONL, the Azure LLM inference CSV and the
BurstGPT CSV, each to :class:`TraceRecord` values (arrival in seconds from
the trace's first request, prompt and output token counts).

Layouts (column names as the public files spell them):

- ``jsonl``: one object per line: ``arrival_s`` (number), ``prompt_tokens``
  and ``output_tokens`` (int >= 1), optional ``client_id`` (str) and
  ``priority`` (int); blank lines are skipped.
- ``azure``: CSV with header ``TIMESTAMP,ContextTokens,GeneratedTokens``
  (the Azure LLM inference traces); TIMESTAMP is a date-time
  (``2023-11-16 18:15:46.6805900``) or seconds.
- ``burstgpt``: CSV with header ``Timestamp,Model,Request tokens,Response
  tokens,Total tokens,Log Type``; Timestamp is seconds; the client is Model.

Rows with zero output tokens (BurstGPT and Azure record failed requests so)
are skipped and counted, never silently. Any other bad row raises
:class:`TraceError` naming the file and its line. Records are returned in
arrival order (a stable sort keeps file order among equal times).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from iterserve.records.input_files import open_input
from iterserve.records.jsonl import json_objects

FORMATS = ("jsonl", "azure", "burstgpt")
_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens")
_JSONL_FIELDS = {"arrival_s", "prompt_tokens", "output_tokens", "client_id", "priority"}


class TraceError(ValueError):
    """A trace file is unreadable or a row is malformed; names file and line."""


@dataclass(frozen=True, slots=True)
class TraceRecord:
    arrival_s: float
    num_prompt_tokens: int
    num_output_tokens: int
    client_id: str
    priority: int = 0
    line: int = 0


@dataclass(frozen=True, slots=True)
class Trace:
    records: tuple[TraceRecord, ...]
    num_failed_skipped: int  # rows with zero output tokens


def read_trace(path: Path, fmt: str) -> Trace:
    readers: dict[str, Callable[[Path], Iterator[TraceRecord | None]]] = {
        "jsonl": _jsonl_rows, "azure": _azure_rows, "burstgpt": _burstgpt_rows}
    if fmt not in readers:
        raise TraceError(f"unknown trace format {fmt!r}; known: {list(FORMATS)}")
    try:  # opening (a missing file, a directory, a device) is records/input_files.py's
        rows = list(readers[fmt](Path(path)))
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:  # a read that fails part way
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    records = [row for row in rows if row is not None]
    if not records:
        raise TraceError(f"{path}: no requests")
    origin_s = min(r.arrival_s for r in records)
    rebased = [TraceRecord(r.arrival_s - origin_s, r.num_prompt_tokens, r.num_output_tokens,
                           r.client_id, r.priority, r.line) for r in records]
    rebased.sort(key=lambda r: r.arrival_s)
    return Trace(tuple(rebased), len(rows) - len(records))


def trace_lengths(path: Path, fmt: str, column: str) -> tuple[int, ...]:
    """One column ("prompt" or "output") of a trace, for empirical lengths."""
    records = read_trace(path, fmt).records
    if column == "prompt":
        return tuple(r.num_prompt_tokens for r in records)
    return tuple(r.num_output_tokens for r in records)


def _jsonl_rows(path: Path) -> Iterator[TraceRecord | None]:
    for line_no, obj in json_objects(path, TraceError):
        where = f"{path}:{line_no}"
        unknown = set(obj) - _JSONL_FIELDS
        if unknown:
            raise TraceError(f"{where}: unknown field(s) {sorted(unknown)}")
        client = obj.get("client_id", "default")
        if not isinstance(client, str) or not client:
            raise TraceError(f"{where}: client_id must be a non-empty string")
        yield TraceRecord(
            _seconds(obj.get("arrival_s"), where, "arrival_s"),
            _count(obj.get("prompt_tokens"), where, "prompt_tokens", minimum=1),
            _count(obj.get("output_tokens"), where, "output_tokens", minimum=1),
            client, _integer(obj.get("priority", 0), where, "priority"), line_no)


def _azure_rows(path: Path) -> Iterator[TraceRecord | None]:
    for line_no, row in _csv_rows(path, _AZURE_COLUMNS):
        where = f"{path}:{line_no}"
        prompt = _count(row["ContextTokens"], where, "ContextTokens", minimum=0)
        output = _count(row["GeneratedTokens"], where, "GeneratedTokens", minimum=0)
        if prompt == 0 or output == 0:
            yield None  # a failed request
            continue
        yield TraceRecord(_timestamp(row["TIMESTAMP"], where), prompt, output, "azure",
                          line=line_no)


def _burstgpt_rows(path: Path) -> Iterator[TraceRecord | None]:
    for line_no, row in _csv_rows(path, _BURSTGPT_COLUMNS):
        where = f"{path}:{line_no}"
        prompt = _count(row["Request tokens"], where, "Request tokens", minimum=0)
        output = _count(row["Response tokens"], where, "Response tokens", minimum=0)
        model = (row["Model"] or "").strip()
        if not model:
            raise TraceError(f"{where}: column 'Model' is empty")
        if prompt == 0 or output == 0:
            yield None  # BurstGPT marks failed requests with 0 response tokens
            continue
        yield TraceRecord(_seconds(row["Timestamp"], where, "Timestamp"), prompt, output, model,
                          line=line_no)


def _csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, Mapping[str, Any]]]:
    with io.TextIOWrapper(open_input(path, TraceError), encoding="utf-8-sig",
                          newline="") as stream:
        reader = csv.DictReader(stream)
        header = [name.strip() for name in reader.fieldnames or []]
        missing = [name for name in required if name not in header]
        if missing:
            raise TraceError(f"{path}:1: missing column(s) {missing}; header has {header}")
        reader.fieldnames = header
        for row in reader:
            if None in row or any(row[name] is None for name in required):
                raise TraceError(f"{path}:{reader.line_num}: expected {len(header)} columns")
            yield reader.line_num, row


def _count(raw: Any, where: str, name: str, *, minimum: int) -> int:
    value = raw
    if isinstance(raw, str):
        text = raw.strip()
        try:
            value = int(text)
        except ValueError:
            # some exports write integral counts as 12.0
            value = _integral_float(text)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise TraceError(f"{where}: column '{name}' must be an integer >= {minimum}, got {raw!r}")
    return value


def _integral_float(text: str) -> int | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return int(number) if math.isfinite(number) and number.is_integer() else None


def _integer(raw: Any, where: str, name: str) -> int:
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise TraceError(f"{where}: {name} must be an integer, got {raw!r}")
    return raw


def _seconds(raw: Any, where: str, name: str) -> float:
    value = raw
    if isinstance(raw, str):
        try:
            value = float(raw.strip())
        except ValueError:
            value = None
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value < 0:
        raise TraceError(f"{where}: column '{name}' must be seconds >= 0, got {raw!r}")
    return float(value)


def _timestamp(raw: str, where: str) -> float:
    text = (raw or "").strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise TraceError(f"{where}: column 'TIMESTAMP' must be a date-time or seconds, "
                         f"got {raw!r}") from None
    if moment.tzinfo is None:  # naive times are read as UTC: no local-time DST shifts
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
