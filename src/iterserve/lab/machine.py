"""Facts about the machine and interpreter a measurement ran on (0x0E
coordinates), read without importing torch."""

from __future__ import annotations

import platform
import sys
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def interpreter() -> str:
    """This Python: its version, install prefix and whether libpython is a
    shared library mapped into the process (a default source build such as
    pyenv's) or linked into the executable (Debian's and Ubuntu's, built
    with profile-guided and link-time optimisation). The simulator's speed
    differs between the two on one CPU, so a timing must name its interpreter
    (docs/benchmarks.md, "Which Python")."""
    try:
        maps = Path("/proc/self/maps").read_text(encoding="utf-8")
        linked = "libpython shared" if "libpython" in maps else "libpython static"
    except OSError:
        linked = "libpython unknown"
    return f"Python {platform.python_version()} ({sys.base_prefix}, {linked})"
