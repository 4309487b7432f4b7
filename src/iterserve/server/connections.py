"""Connection limits: what a slow, idle or hostile client may hold.

uvicorn alone reads a request's headers and body for as long as the client
cares to send them, and accepts connections until the file descriptors run
out. Here:

- :func:`guarded_protocol` is uvicorn's h11 protocol with a header-read
  deadline (a connection that has not sent a whole request head within
  ``header_timeout_s`` of connecting, or of its first byte after an idle
  keep-alive, is closed: slowloris) and a cap on open connections (the one
  past ``max_connections`` is answered 503 and closed at once, so it holds a
  descriptor for microseconds, not until its client gives up). The idle
  keep-alive timeout is uvicorn's own ``timeout_keep_alive``.
- :class:`RequestGuard` is ASGI middleware that checks the API key from the
  headers before any body byte is read (401 before a 400 about the body),
  then reads the body against ``max_body_bytes`` (413) and a body-read
  deadline (408: a stalled body), and ends a body still being read when the
  server starts draining (503), so a shutdown never waits on one.
- :class:`AcceptErrorFilter` turns asyncio's per-accept ``socket.accept()
  out of system resource`` error (up to a hundred a second with a traceback
  each while descriptors are exhausted) into one warning until accepting
  works again.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import resource
import time
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from iterserve.server.errors import error_body
from iterserve.server.limits import ConnectionLimits

logger = logging.getLogger("iterserve.server")

#: how often a body read in progress looks at its deadline and the drain switch
BODY_POLL_S = 0.25
#: descriptors kept free beside the connections (log files, the listener, the model's files)
RESERVED_FDS = 64
_ACCEPT_OUT_OF_RESOURCE = "socket.accept() out of system resource"


def fit_to_descriptors(max_connections: int) -> tuple[int, int]:
    """Raise the soft open-file limit to the hard one, and return
    ``(connections allowed, descriptor limit)``: at most the limit less
    :data:`RESERVED_FDS`, so the cap answers 503 before accept() fails."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return max_connections, soft
    return max(1, min(max_connections, soft - RESERVED_FDS)), soft


def _raw_response(status: int, reason: str, message: str) -> bytes:
    body = json.dumps(error_body(status, message)).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"connection: close\r\ncontent-length: {len(body)}\r\n\r\n")
    return head.encode() + body


_AT_CAPACITY = _raw_response(503, "Service Unavailable",
                             "too many open connections; retry later")


def guarded_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol with ``limits``' header deadline and connection cap."""

    class GuardedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                self.connections.discard(self)
                transport.write(_AT_CAPACITY)
                transport.close()
                return
            self._arm_header_timer()

        def data_received(self, data: bytes) -> None:
            if self._is_awaiting_head():
                self._arm_header_timer()  # an idle keep-alive connection starts a new head
            super().data_received(data)
            if not self._is_awaiting_head():
                self._cancel_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_header_timer()
            super().connection_lost(exc)

        def _is_awaiting_head(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm_header_timer(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(limits.header_timeout_s,
                                                          self._header_timed_out)

        def _cancel_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _header_timed_out(self) -> None:
            self._header_timer = None
            if self._is_awaiting_head() and not self.transport.is_closing():
                self.transport.close()  # a slowloris head or a connection that never spoke

    return GuardedH11Protocol


class RequestGuard:
    """Pure ASGI middleware, outermost: the API key (``/v1/`` routes), then
    the body read whole against its size limit and deadline before any
    route parses it (module doc)."""

    def __init__(self, app: ASGIApp, api_key: str | None, max_body_bytes: int,
                 body_timeout_s: float, is_draining: Callable[[], bool]) -> None:
        self.app = app
        self.api_key = api_key
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.is_draining = is_draining

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        if scope["path"].startswith("/v1/") and not self.has_key(headers):
            await send_error(send, 401, "missing or invalid API key (Authorization: Bearer KEY)")
            return
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or
                                     int(declared) > self.max_body_bytes):
            await send_error(send, 413, f"the request body exceeds {self.max_body_bytes} bytes")
            return
        messages = await self._read_body(receive, send)
        if messages is None:
            return
        replay = iter(messages)

        async def replayed() -> Message:
            return next(replay, None) or await receive()

        await self.app(scope, replayed, send)

    def has_key(self, headers: dict[bytes, bytes]) -> bool:
        if self.api_key is None:
            return True
        given = headers.get(b"authorization", b"")
        return hmac.compare_digest(given, f"Bearer {self.api_key}".encode())

    async def _read_body(self, receive: Receive, send: Send) -> list[Message] | None:
        """The request's messages, or None once an error was answered."""
        deadline = time.monotonic() + self.body_timeout_s
        messages: list[Message] = []
        size = 0
        while True:
            message = await self._next_message(receive, deadline)
            if isinstance(message, int):
                text = ("the server is shutting down" if message == 503 else
                        f"the request body did not arrive within {self.body_timeout_s:g} s")
                await send_error(send, message, text)
                return None
            messages.append(message)
            size += len(message.get("body", b""))
            if size > self.max_body_bytes:
                await send_error(send, 413, f"the request body exceeds {self.max_body_bytes} bytes")
                return None
            if message["type"] != "http.request" or not message.get("more_body", False):
                return messages

    async def _next_message(self, receive: Receive, deadline: float) -> Message | int:
        """The next message, or the status that ends the read (408 late, 503 draining)."""
        while True:
            if self.is_draining():
                return 503
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                return 408
            try:
                return await asyncio.wait_for(receive(), min(left_s, BODY_POLL_S))
            except TimeoutError:
                continue


async def send_error(send: Send, status: int, message: str) -> None:
    """An OpenAI-style error answered before the app ran; the connection is
    closed after it (its request body may be unread)."""
    body = json.dumps(error_body(status, message)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def _is_late_accept_retry(context: dict[str, Any]) -> bool:
    """asyncio pauses accepting for a second after an accept error and then
    starts again; a server shut down within that second closed the listening
    socket, and the retry fails on its closed descriptor (nothing to do)."""
    return (isinstance(context.get("exception"), ValueError)
            and "_start_serving" in repr(context.get("handle")))


class AcceptErrorFilter:
    """A loop exception handler: asyncio's accept error while descriptors
    are exhausted is logged once (with how to raise the limit), not once per
    failed accept; every other error goes to the default handler."""

    def __init__(self) -> None:
        self.num_suppressed = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if _is_late_accept_retry(context):
            return  # the listener closed at shutdown before asyncio's accept retry fired
        if context.get("message") != _ACCEPT_OUT_OF_RESOURCE:
            loop.default_exception_handler(context)
            return
        if self.num_suppressed == 0:
            exc = context.get("exception")
            logger.warning("accepting connections failed (%s); new connections wait until "
                           "descriptors free up (raise `ulimit -n` or lower --max-connections); "
                           "logged once", exc)
        self.num_suppressed += 1
