"""Helpers shared by the server tests."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_up(base_url: str, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    """Until a served ``proc`` answers ``/health``; its output when it dies first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            if httpx.get(base_url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("the server did not come up")


def assert_log_replays(engine: Any, log: Path) -> None:
    """Write a stopped server ``engine``'s decision log to ``log`` and
    replay it with ``iterserve replay`` in a fresh process: bit for bit."""
    engine.write_logs(log, None)
    replayed = subprocess.run([sys.executable, "-m", "iterserve.cli.main", "replay", str(log)],
                              capture_output=True, text=True, timeout=300)
    assert replayed.returncode == 0, replayed.stderr
    assert "re-derived bit for bit" in replayed.stdout
