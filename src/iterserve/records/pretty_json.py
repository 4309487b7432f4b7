"""Indented JSON reports whose large sections were encoded elsewhere.

A report file is ``json.dump(report, indent=2, sort_keys=True)``. A long
run's per-request sections (100,000 requests: about 30 MB of that text) can
be built and encoded in another process while this one computes the rest;
:func:`write_sorted_json` then writes the same bytes the whole dict would
have written, each pre-encoded section at its key, as it came (no copy of
it is made here).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any


def encode_section(value: Any) -> bytes:
    """A section's text as :func:`write_sorted_json` writes it under a
    top-level key: ``json.dumps(value, indent=2, sort_keys=True)`` with its
    lines moved in one level (JSON text holds no raw newline inside a
    string, so every newline is a line break), as ASCII bytes (the stdlib
    escapes every other character)."""
    return json.dumps(value, indent=2, sort_keys=True).replace("\n", "\n  ").encode("ascii")


def write_sorted_json(stream: IO[bytes], report: Mapping[str, Any],
                      encoded: Mapping[str, bytes]) -> None:
    """``json.dump({**report, **sections}, indent=2, sort_keys=True)``'s
    bytes, where ``encoded[key]`` is :func:`encode_section` of that
    section's value. A key in both is refused (ValueError): one of them
    would be lost."""
    both = report.keys() & encoded.keys()
    if both:
        raise ValueError(f"report sections given twice: {', '.join(sorted(both))}")
    keys = sorted([*report, *encoded])
    if not keys:
        stream.write(b"{}")
        return
    separator = b"{\n  "
    for key in keys:
        stream.write(b"%b%b: " % (separator, json.dumps(key).encode("ascii")))
        stream.write(encoded[key] if key in encoded else encode_section(report[key]))
        separator = b",\n  "
    stream.write(b"\n}")
