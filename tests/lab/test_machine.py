"""The machine facts a benchmark row carries (0x0E coordinates)."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import pytest

from iterserve.lab import machine


def test_interpreter_names_version_prefix_and_how_libpython_is_linked() -> None:
    text = machine.interpreter()
    assert text.startswith(f"Python {platform.python_version()} ({sys.base_prefix}, libpython ")
    assert text.endswith(("shared)", "static)", "unknown)"))


def test_interpreter_reads_the_link_from_the_process_maps(monkeypatch: pytest.MonkeyPatch) -> None:
    def maps_with(line: str):  # type: ignore[no-untyped-def]
        def read_text(self: Path, encoding: str = "utf-8") -> str:
            assert str(self) == "/proc/self/maps"
            return line
        return read_text

    monkeypatch.setattr(Path, "read_text", maps_with("7f r-xp /usr/lib/libpython3.11.so.1.0\n"))
    assert machine.interpreter().endswith("libpython shared)")
    monkeypatch.setattr(Path, "read_text", maps_with("55 r-xp /usr/bin/python3.11\n"))
    assert machine.interpreter().endswith("libpython static)")

    def unreadable(self: Path, encoding: str = "utf-8") -> str:
        raise PermissionError(str(self))

    monkeypatch.setattr(Path, "read_text", unreadable)
    assert machine.interpreter().endswith("libpython unknown)")
    assert machine.cpu_model()  # falls back to platform.processor() or "unknown"
