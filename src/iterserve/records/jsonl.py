"""JSON Lines input: each non-blank line of a file as one JSON object, with
its line number. One reader for the files a user hands in line by line
(traces, metric events), so a bad line reads the same everywhere:
``PATH:LINE: not valid JSON (...)``, ``PATH:LINE: must be a JSON object``,
``PATH:LINE: not UTF-8 text``, each raised as the caller's own error type.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from iterserve.records.input_files import open_input


def json_objects(path: str | Path, error: type[Exception]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of ``path``, in file
    order, one at a time (the file is never held whole); a line that is not
    UTF-8, not JSON or not an object raises ``error`` naming path and line."""
    with open_input(Path(path), error) as stream:
        yield from parse_lines(stream, error, where=lambda number: f"{path}:{number}")


def split_lines(pieces: Iterable[bytes], max_line_bytes: int) -> Iterator[bytes]:
    """The lines of the bytes that come in ``pieces``, without their
    ``\\n``, as ``bytes.split(b"\\n")`` cuts the joined bytes (a last empty
    line included), holding one piece and one line at a time. A line longer
    than ``max_line_bytes`` comes out as its first ``max_line_bytes + 1``
    bytes, so that :func:`parse_lines` refuses it by its length without
    reading the rest."""
    partial: list[bytes] = []  # the pieces of a line not yet ended
    num_partial_bytes = 0
    for piece in pieces:
        lines = piece.split(b"\n")
        if len(lines) > 1:
            lines[0] = b"".join([*partial, lines[0]])
            partial, num_partial_bytes = [], 0
            yield from lines[:-1]
        partial.append(lines[-1])
        num_partial_bytes += len(lines[-1])
        if num_partial_bytes > max_line_bytes:
            yield b"".join(partial)[:max_line_bytes + 1]
            return
    yield b"".join(partial)


def parse_lines(lines: Iterable[bytes], error: type[Exception], *,
                where: Callable[[int], str], strict_numbers: bool = False,
                max_line_bytes: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of ``lines``; a bad
    line raises ``error`` prefixed with ``where(number)``. ``strict_numbers``
    refuses NaN and Infinity (the decision log's canonical text has none);
    ``max_line_bytes`` refuses a longer line before parsing it."""
    loads = orjson.loads
    for number, raw in enumerate(lines, start=1):
        if max_line_bytes is not None and len(raw) > max_line_bytes:
            raise error(f"{where(number)}: longer than {max_line_bytes} bytes")
        # orjson first (an events file can hold millions of lines), but not
        # where it would read an integer as a float, maybe
        try:
            obj = (loads(raw) if _LONG_DIGITS not in raw.translate(_DIGITS_TO_ZERO)
                   else _UNREAD)
        except orjson.JSONDecodeError:  # blank, or what orjson refuses
            obj = _UNREAD
        if obj is _UNREAD:  # the stdlib decides
            if not raw.strip():
                continue
            obj = _stdlib_object(raw, where(number), error, strict_numbers)
        if type(obj) is not dict:
            raise error(f"{where(number)}: must be a JSON object, got {json_kind(obj)}")
        yield number, obj


_UNREAD = object()  # a line orjson did not read
# orjson reads an integer past 64 bits as a float, the stdlib as an int: a
# line with 19 digits in a row goes to the stdlib (ours have at most 17);
# found by mapping every digit to 0 (C speed, unlike a regex class repeat)
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19


def _stdlib_object(raw: bytes, where: str, error: type[Exception],
                   strict_numbers: bool) -> object:
    """``json.loads`` of a line orjson refused or may misread: the value the
    stdlib reads (NaN and Infinity unless ``strict_numbers``, integers past
    64 bits, lone surrogates, 1e400), else ``error`` naming the line and
    what is wrong."""
    try:
        text = raw.decode("utf-8")
        return (json.loads(text, parse_constant=_reject_constant) if strict_numbers
                else json.loads(text))
    except UnicodeDecodeError:
        raise error(f"{where}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer past int's limit
        raise error(f"{where}: not valid JSON ({exc})") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def json_kind(value: Any) -> str:
    """How a message names the JSON type of ``value`` ('an object', 'null', ...)."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
             int: "an integer", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
