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
"""

from __future__ import annotations

import json
import re

import orjson

_OPTIONS = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS
            | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS)
# a number token that starts "0.0000" (not "10.0000"), a one-digit negative exponent
_SMALL_FIXED = re.compile(rb"(?<![0-9.])0\.0000")
_SHORT_EXPONENT = re.compile(rb"[0-9]e-[0-9](?![0-9])")


def canonical_json(obj: object) -> str:
    """``obj`` as canonical JSON text (see the module docstring)."""
    try:
        data = orjson.dumps(obj, option=_OPTIONS)
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
        data = orjson.dumps(obj, option=_OPTIONS)
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
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))
