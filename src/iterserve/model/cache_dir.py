"""Where iterserve keeps what it makes once: the built-in model, benchmark
checkpoints and the compiled kernels."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """`$XDG_CACHE_HOME/iterserve` (`~/.cache/iterserve` when unset; read per call)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "iterserve"
