"""Shutdown that always finishes within the drain timeout.

The first SIGTERM / SIGINT stops accepting (new generation requests get
503, ``/health`` says draining, a request body still being read is answered
503 and its connection closed), lets the in-flight requests run until the
drain deadline less a short flush reserve, aborts the rest (0x0C: each
stream ends with an ``abort`` chunk and an error chunk), then lets uvicorn
close the connections: idle and slowloris ones at once, the rest when their
responses end or, at the deadline, by cancelling them. The caller then
writes the decision and event logs.

A second signal skips what is left of the drain: uvicorn exits at once
(``force_exit``), the caller aborts whatever still runs and writes the logs.
uvicorn re-raises a signal it handled once it returns (killing the process
before any log is written); neither signal here is handed to it for that.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
import time
from types import FrameType

import uvicorn

from iterserve.engine.online import OnlineEngine
from iterserve.server.connections import AcceptErrorFilter
from iterserve.server.guard import Gatekeeper

#: the part of the drain timeout kept for streams' final chunks to reach their clients
MAX_FLUSH_S = 1.0


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, gatekeeper: Gatekeeper, engine: OnlineEngine,
                 drain_timeout_s: float) -> None:
        super().__init__(config)
        self._gatekeeper = gatekeeper
        self._engine = engine
        self._drain_timeout_s = drain_timeout_s
        self._drain: threading.Thread | None = None
        self.accept_errors = AcceptErrorFilter()
        self.was_forced = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(self.accept_errors)
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig not in (signal.SIGTERM, signal.SIGINT):
            super().handle_exit(sig, frame)
        elif self._drain is None:
            self.drain()
        else:  # a second signal: no more waiting on anyone
            self.was_forced = True
            self.force_exit = True
            self.should_exit = True

    def drain(self) -> None:
        """Start draining on a helper thread; uvicorn exits when it is done."""
        self._gatekeeper.is_draining = True
        self._engine.stop_accepting()
        deadline_s = time.monotonic() + self._drain_timeout_s
        flush_s = min(MAX_FLUSH_S, self._drain_timeout_s / 2)
        self._drain = threading.Thread(target=self._drain_then_exit,
                                       args=(deadline_s, flush_s), name="iterserve-drain",
                                       daemon=True)
        self._drain.start()

    def _drain_then_exit(self, deadline_s: float, flush_s: float) -> None:
        self._engine.shutdown(max(0.0, deadline_s - flush_s - time.monotonic()))
        # uvicorn waits for open responses at most this long, then cancels them
        self.config.timeout_graceful_shutdown = int(max(0.0, deadline_s - time.monotonic()))
        self.should_exit = True
