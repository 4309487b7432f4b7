"""Indented JSON reports whose large sections were encoded elsewhere.

A report file is ``json.dump(report, indent=2, sort_keys=True)``. A long
run's per-request sections (100,000 requests: about 30 MB of that text) can
be built and encoded in another process while this one computes the rest;
:func:`write_sorted_json` then writes the same bytes the whole dict would
have written, splicing each pre-encoded section in at its key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any


def encode_section(value: Any) -> str:
    """A section's text as :func:`write_sorted_json` takes it: the value as
    a top-level document (``json.dumps(value, indent=2, sort_keys=True)``)."""
    return json.dumps(value, indent=2, sort_keys=True)


def write_sorted_json(stream: IO[str], report: Mapping[str, Any],
                      encoded: Mapping[str, str]) -> None:
    """``json.dump({**report, **sections}, stream, indent=2, sort_keys=True)``
    where ``encoded[key]`` is :func:`encode_section` of that section's
    value. A key in both is refused (ValueError): one of them would be lost."""
    both = report.keys() & encoded.keys()
    if both:
        raise ValueError(f"report sections given twice: {', '.join(sorted(both))}")
    keys = sorted([*report, *encoded])
    if not keys:
        stream.write("{}")
        return
    separator = "{\n  "
    for key in keys:
        text = encoded[key] if key in encoded else encode_section(report[key])
        # a nested document's lines move in one level; JSON text has no raw
        # newline inside a string, so every newline is a line break
        stream.write(f"{separator}{json.dumps(key)}: {text.replace(chr(10), chr(10) + '  ')}")
        separator = ",\n  "
    stream.write("\n}")
