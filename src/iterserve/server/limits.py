"""The connection limits' values: a plain config, importable by the CLI's
parser without the HTTP stack (the mechanism: ``server/connections.py``)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Production defaults, each a ``serve`` flag (docs/server-limits.md)."""

    max_connections: int = 2048
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError(f"--max-connections must be >= 1, got {self.max_connections}")
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_timeout_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                flag = "--" + name.removesuffix("_s").replace("_", "-")
                raise ValueError(f"{flag} must be a positive number of seconds, got {value}")
