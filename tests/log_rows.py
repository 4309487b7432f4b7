"""Decision-log lines in row form for the tests that read or edit them.

Log format 5 writes an iteration's ``plan.work`` and ``result.completed`` as
columns (one array per field); format 6 as tables (columns whose repeated
values are written once: ``records/log_columns.py``). A test that looks at,
or forges, one work item or completion reads the line with :func:`as_rows`
(one object per item, format 4's shape), edits it, and writes it back with
:func:`as_columns`: the bytes a format-6 writer would have put there (or
format 5's arrays for a line read as arrays).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from iterserve.engine.decision_log import CHAIN_KEY, chain_digest
from iterserve.records.codec import (
    COMPLETED_COLUMNS,
    WORK_COLUMNS,
    columns_of_tables,
    completed_table,
    dumps,
    rows_of_columns,
    work_table,
)
from iterserve.records.log_columns import ROWS_KEY

_PARTS = (("plan", "work", WORK_COLUMNS), ("result", "completed", COMPLETED_COLUMNS))


def _is_table(columns: Any) -> bool:
    return isinstance(columns, dict) and ROWS_KEY in columns


def as_rows(line: dict[str, Any]) -> dict[str, Any]:
    """An iteration line with its work and completions as row objects
    (changed in place; other lines and row-form lines as they are)."""
    if line.get("type") != "iteration":
        return line
    work, completed = line["plan"]["work"], line["result"]["completed"]
    if _is_table(work):
        work, completed = columns_of_tables(work, completed)
        line["plan"]["work"], line["result"]["completed"] = work, completed
    for part, key, names in _PARTS:
        if isinstance(line[part][key], dict):
            line[part][key] = rows_of_columns(line[part][key], names)
    return line


def as_columns(line: dict[str, Any], *, tables: bool = True) -> dict[str, Any]:
    """:func:`as_rows` undone: the work and completions as format 6's
    tables (``tables`` False: format 5's arrays)."""
    if line.get("type") != "iteration":
        return line
    for part, key, names in _PARTS:
        rows = line[part][key]
        if isinstance(rows, list):
            line[part][key] = {name: [row[name] for row in rows] for name in names}
    if tables:
        work, completed = line["plan"]["work"], line["result"]["completed"]
        if not _is_table(work):
            line["plan"]["work"] = work_table(work, len(work["request_id"]))
            line["result"]["completed"] = completed_table(
                completed, len(completed["request_id"]), work)
    return line


def row_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of the log at ``path``, iteration lines in row form."""
    return [as_rows(json.loads(text)) for text in Path(path).read_text().splitlines()]


def row_form_bytes(line: bytes) -> bytes:
    """A format-5 or -6 line's bytes as format 4 wrote the same facts: its
    work and completions as row objects, the canonical text, ``chain``
    appended last. The golden tests compare decisions against logs
    committed before format 5 with it (the chain is then no longer this
    text's; they mask it)."""
    obj = json.loads(line)
    if obj.get("type") != "iteration":
        return line
    chain = obj.pop("chain", None)
    text = dumps(as_rows(obj))
    if chain is None:
        return text.encode()
    return f'{text[:-1]},"chain":"{chain}"}}'.encode()


def as_format_4(data: bytes) -> bytes:
    """A format-5 or -6 log written as format 4 would have written the same
    run: the header's ``format`` 4, every iteration in row form, every
    line's chain computed again over its text. Equal bytes to a pinned
    format-4 log mean the same facts, line for line."""
    return as_format(data, 4)


def as_format(data: bytes, log_format: int) -> bytes:
    """A format-5 or -6 log as format ``log_format`` (4, 5 or 6) would have
    written the same run, every chain computed again."""
    assert log_format in (4, 5, 6), log_format
    lines = [json.loads(text) for text in data.decode().splitlines()]
    for obj in lines:
        if obj["type"] == "header":
            assert obj["format"] in (5, 6), obj["format"]
            obj["format"] = log_format
        as_rows(obj)
        if log_format > 4:
            as_columns(obj, tables=log_format == 6)
    return rechained(lines).encode()


def rechained(lines: list[dict[str, Any]]) -> str:
    """Decision-log ``lines`` (edited) as the log's text, each line's chain
    computed again from the ones before it (the old chains dropped)."""
    out, chain = [], ""
    for obj in lines:
        obj.pop(CHAIN_KEY, None)
        canonical = dumps(obj)
        chain = chain_digest(chain, canonical)
        out.append(f'{canonical[:-1]},"{CHAIN_KEY}":"{chain}"}}\n')
    return "".join(out)
