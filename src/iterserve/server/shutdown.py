"""Graceful shutdown: the first SIGTERM / SIGINT stops
accepting (new generation requests get 503, ``/health`` says draining),
drains the in-flight requests up to the drain timeout, aborts the rest
(0x0C: successor generations, blocks freed), then lets uvicorn exit."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import uvicorn

from iterserve.engine.online import OnlineEngine
from iterserve.server.guard import Gatekeeper


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, gatekeeper: Gatekeeper, engine: OnlineEngine,
                 drain_timeout_s: float) -> None:
        super().__init__(config)
        self._gatekeeper = gatekeeper
        self._engine = engine
        self._drain_timeout_s = drain_timeout_s
        self._drain: threading.Thread | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._drain is not None or sig not in (signal.SIGTERM, signal.SIGINT):
            super().handle_exit(sig, frame)  # a second signal exits at once
            return
        self.drain()

    def drain(self) -> None:
        """Start draining on a helper thread; uvicorn exits when it is done."""
        self._gatekeeper.is_draining = True
        self._engine.stop_accepting()
        self._drain = threading.Thread(target=self._drain_then_exit, name="iterserve-drain",
                                       daemon=True)
        self._drain.start()

    def _drain_then_exit(self) -> None:
        self._engine.shutdown(self._drain_timeout_s)
        self.should_exit = True
