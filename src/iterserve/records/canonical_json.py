"""Canonical JSON text: sorted keys, compact separators, ASCII only.

The text is exactly ``json.dumps(obj, sort_keys=True, separators=(",",
":"))`` (ensure_ascii), the encoding every state digest and decision log
line is defined by. orjson writes it about ten times faster
(``benchmarks/bench_decision_log.py``); where its bytes can differ from the
stdlib's the stdlib writes instead: output holding a byte outside
printable ASCII (orjson writes non-ASCII text and DEL raw), a float below
1e-4 (orjson writes ``0.00001`` or ``1e-6`` where the stdlib writes
``1e-05`` and ``1e-06``: its output then holds ``0.0000`` or a one-digit
negative exponent), or anything orjson refuses (integers beyond
64 bits, non-string keys) or would encode where the stdlib raises
(dataclasses, datetimes, subclasses: passed through to raise). Non-finite
floats are the one difference left (orjson ``null``, the stdlib ``NaN``);
no validated record holds one.

A part of a record can be encoded ahead as :class:`Encoded` (see
:func:`encoded_rows`: a decision-log line's plan and result rows, dicts
built with their keys in order, encoded without the per-row key sort):
orjson writes its bytes verbatim and the stdlib fallback encodes its value,
so the text is the one the plain value gives.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_PASSTHROUGH = (orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
                | orjson.OPT_PASSTHROUGH_SUBCLASS)
_OPTIONS = orjson.OPT_SORT_KEYS | _PASSTHROUGH
# a number token that starts "0.0000" (not "10.0000"), a one-digit negative exponent
_SMALL_FIXED = re.compile(rb"(?<![0-9.])0\.0000")
_SHORT_EXPONENT = re.compile(rb"[0-9]e-[0-9](?![0-9])")


class Encoded:
    """A value and its canonical bytes, made ahead (by :func:`encoded_rows`).
    The encoders here write ``fragment`` where they meet it; the stdlib
    fallback writes ``value``."""

    __slots__ = ("value", "fragment")

    def __init__(self, value: object, data: bytes) -> None:
        self.value = value
        self.fragment = orjson.Fragment(data)

    def __eq__(self, other: object) -> bool:
        """Equal to what its value equals: a record holding it compares as
        the record holding the plain value."""
        return bool(self.value == (other.value if type(other) is Encoded else other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Encoded({self.value!r})"


def _orjson_default(obj: object) -> orjson.Fragment:
    if type(obj) is Encoded:
        return obj.fragment
    raise TypeError  # refused or passed through: the stdlib decides


def _stdlib_default(obj: object) -> object:
    if type(obj) is Encoded:
        return obj.value
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def encoded_rows(rows: list[dict[str, Any]]) -> Encoded | list[dict[str, Any]]:
    """``rows`` with their canonical bytes, for a record that
    :func:`canonical_json` encodes. Each row's keys must have been inserted
    in sorted order (a dict display written that way): orjson then writes
    them without sorting, which for a step's rows is most of the key sort's
    cost. A nested dict (or a ``{`` in a string: one brace a row is the
    test) is encoded with the sort. ``rows`` itself where orjson refuses
    a value (the stdlib decides, as for any record)."""
    try:
        data = orjson.dumps(rows, option=_PASSTHROUGH)
        if data.count(b"{") != len(rows):
            data = orjson.dumps(rows, option=_OPTIONS)
    except TypeError:
        return rows
    return Encoded(rows, data)


def canonical_json(obj: object) -> str:
    """``obj`` as canonical JSON text (see the module docstring)."""
    try:
        data = orjson.dumps(obj, default=_orjson_default, option=_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: refused, or passed through
        return stdlib_canonical_json(obj)
    if is_plain_ascii(data):  # the common case
        return data.decode("ascii")
    if _may_differ(data):
        return stdlib_canonical_json(obj)
    return data.decode("ascii")


def canonical_json_bytes(obj: object) -> bytes:
    """:func:`canonical_json` as ASCII bytes, without a text round trip."""
    try:
        data = orjson.dumps(obj, default=_orjson_default, option=_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: refused, or passed through
        return stdlib_canonical_json(obj).encode()
    if is_plain_ascii(data) or not _may_differ(data):
        return data
    return stdlib_canonical_json(obj).encode()


def canonical_strings_bytes(strings: tuple[str, ...]) -> bytes:
    """:func:`canonical_json_bytes` of a list of strings (a queue's ids):
    without numbers only non-ASCII text and DEL can differ from the stdlib's,
    so the number scans of :func:`is_plain_ascii` are skipped."""
    try:
        data = orjson.dumps(strings, option=_OPTIONS)
    except TypeError:
        return stdlib_canonical_json(list(strings)).encode()
    if data.isascii() and b"\x7f" not in data:
        return data
    return stdlib_canonical_json(list(strings)).encode()


def is_plain_ascii(data: bytes) -> bool:
    """True when none of :func:`_may_differ`'s substrings occurs in orjson's
    ``data``: its bytes are then the stdlib's (a memchr-speed test). A
    two-byte needle is searched byte by byte, slowly where ``e`` is common
    (every key and kind name): ``e-`` is looked for only when a ``-`` is
    there at all (one memchr; the decision log's lines mostly hold none)."""
    return (data.isascii() and b"\x7f" not in data and b"0.0000" not in data
            and (b"-" not in data or b"e-" not in data))


def _may_differ(data: bytes) -> bool:
    """True where orjson's bytes may not be the stdlib's. Substring tests
    first (a memchr-speed scan); the regexes only run when one hits."""
    if not data.isascii() or b"\x7f" in data:
        return True
    if b"0.0000" in data and _SMALL_FIXED.search(data):
        return True
    return b"e-" in data and _SHORT_EXPONENT.search(data) is not None


def stdlib_canonical_json(obj: object) -> str:
    """The reference encoding :func:`canonical_json` reproduces."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_stdlib_default)
