"""Boundary guards: the request body size limit, the API key and draining."""

from __future__ import annotations

import hmac
import json

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from iterserve.engine.online import OnlineEngine
from iterserve.server.errors import APIError, error_body


class BodyLimit:
    """Pure ASGI middleware: a body over ``max_body_bytes`` gets 413 before
    any route reads it (declared length or counted while streaming in)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and (not declared.isdigit() or
                                     int(declared) > self.max_body_bytes):
            await _too_large(send, self.max_body_bytes)
            return
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if size > self.max_body_bytes:
                await _too_large(send, self.max_body_bytes)
                return
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        replay = iter(messages)

        async def replayed() -> Message:
            return next(replay, None) or await receive()

        await self.app(scope, replayed, send)


async def _too_large(send: Send, limit: int) -> None:
    body = json.dumps(error_body(413, f"the request body exceeds {limit} bytes")).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class Gatekeeper:
    """The API key check and the draining switch (SIGTERM: new work gets 503)."""

    def __init__(self, engine: OnlineEngine, api_key: str | None) -> None:
        self._engine = engine
        self._api_key = api_key
        self.is_draining = False

    def check_key(self, request: Request) -> None:
        if self._api_key is None:
            return
        given = request.headers.get("authorization", "")
        expected = f"Bearer {self._api_key}"
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise APIError(401, "missing or invalid API key (Authorization: Bearer KEY)")

    def admit(self, request: Request) -> None:
        """Called first by every generation route."""
        self.check_key(request)
        if self.is_draining or not self._engine.is_accepting:
            raise APIError(503, "the server is shutting down", headers={"Retry-After": "5"})
