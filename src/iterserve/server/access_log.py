"""One access log line per HTTP request (logger ``iterserve.access``).

A pure ASGI middleware times the request from its first byte to the end of
its response body (a stream included) and reads the status it sent. A
generation route notes the engine request id(s) and the client
(:func:`note_requests`); the line then adds the request's prompt and output
tokens and its TTFT from the engine's facts (counted from arrival, 0x07).
``/health`` and ``/metrics`` are logged at DEBUG: scrapes are not traffic.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from iterserve.server.metrics_observer import RequestSummary

logger = logging.getLogger("iterserve.access")

_QUIET_PATHS = frozenset({"/health", "/metrics"})
_STATE_KEY = "iterserve_access"


@dataclass(slots=True)
class AccessNote:
    """What a route learned about its request, for the access line."""

    request_ids: list[str] = field(default_factory=list)
    client: str = "-"


def note_requests(request: Request, request_ids: Sequence[str], *, client: str) -> None:
    """Called by a generation route once the engine took its requests (its
    access line takes their summaries: an ended request's is kept only
    until then)."""
    note = request.scope.get("state", {}).get(_STATE_KEY)
    if note is not None:
        note.request_ids.extend(request_ids)
        note.client = client


class AccessLog:
    """``take_summary``: an ended engine request's token counts and TTFT."""

    def __init__(self, app: ASGIApp,
                 take_summary: Callable[[str], RequestSummary | None]) -> None:
        self.app = app
        self._take_summary = take_summary

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        note = AccessNote()
        scope.setdefault("state", {})[_STATE_KEY] = note
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self._log(scope, note, status or 500, time.perf_counter() - began)

    def _log(self, scope: Scope, note: AccessNote, status: int, duration_s: float) -> None:
        path = scope.get("path", "")
        level = logging.DEBUG if path in _QUIET_PATHS else logging.INFO
        # taken even when no line is logged: an ended request's summary is kept only for this
        summaries = [self._take_summary(rid) for rid in note.request_ids]
        if not logger.isEnabledFor(level):
            return
        known = [s for s in summaries if s is not None]
        prompt = sum(s.num_prompt_tokens for s in known) if known else None
        output = sum(s.num_output_tokens for s in known) if known else None
        ttfts = [s.ttft_s for s in known if s.ttft_s is not None]
        peer = scope.get("client") or ("-", 0)
        logger.log(level, '%s:%s "%s %s" %d id=%s client=%s prompt_tokens=%s output_tokens=%s '
                   "ttft_s=%s duration_s=%.3f", peer[0], peer[1], scope.get("method", "-"), path,
                   status, ",".join(note.request_ids) or "-", note.client, _or_dash(prompt),
                   _or_dash(output), f"{min(ttfts):.3f}" if ttfts else "-", duration_s)


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)
