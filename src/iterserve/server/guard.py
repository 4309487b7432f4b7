"""Boundary guards: the API key and draining (the body limits and the key's
first check, before any body byte is read, are in ``connections.RequestGuard``)."""

from __future__ import annotations

import hmac

from starlette.requests import Request

from iterserve.engine.online import OnlineEngine
from iterserve.server.errors import APIError


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
