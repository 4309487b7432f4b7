"""The open-loop replay of ``iterserve bench``: every request is sent at its
scheduled time on the wall clock from the run start, whether or not earlier
ones have ended (``max_concurrency`` optionally caps the requests in flight;
a request over the cap waits in the client, and that wait stays part of its
TTFT, which runs from the scheduled arrival).

Before the run, :func:`probe_server` asks ``/v1/models`` for the served
model (an unreachable server or a refused key is a :class:`BenchInputError`)
and ``/version`` for the server's version, when it has one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from iterserve.lab.bench_client import RequestRecord, send
from iterserve.lab.bench_plan import RequestPlan

_PROBE_TIMEOUT_S = 10.0


class BenchInputError(ValueError):
    """The URL, the server's answer to the probe or a bench flag is unusable."""


@dataclass(frozen=True, slots=True)
class Target:
    base_url: str  # scheme://host[:port][/prefix], without a trailing /v1
    api_key: str | None = None

    def headers(self) -> dict[str, str]:
        return {} if self.api_key is None else {"Authorization": f"Bearer {self.api_key}"}


@dataclass(frozen=True, slots=True)
class ServerFacts:
    model_ids: tuple[str, ...]
    version: str | None  # /version's "version", None when the server has none


def parse_url(url: str) -> str:
    """``http(s)://host[:port][/path]`` without a trailing ``/`` or ``/v1``."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BenchInputError(f"--url {url!r}: expected http://HOST[:PORT] or https://...")
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise BenchInputError(f"--url {url!r}: the port is not a number in 0-65535") from None
    path = parts.path.rstrip("/")
    path = path[:-3] if path.endswith("/v1") else path
    return f"{parts.scheme}://{parts.netloc}{path}"


def probe_server(target: Target) -> ServerFacts:
    try:
        with httpx.Client(base_url=target.base_url, timeout=_PROBE_TIMEOUT_S,
                          headers=target.headers()) as client:
            models = client.get("/v1/models")
            version = client.get("/version")
    except httpx.HTTPError as exc:
        raise BenchInputError(f"cannot reach {target.base_url}: "
                              f"{type(exc).__name__}: {exc}") from None
    if models.status_code == 401:
        raise BenchInputError(f"{target.base_url}/v1/models: 401, the server wants an API key "
                              "(--api-key)")
    try:
        ids = tuple(str(card["id"]) for card in models.json()["data"])
    except (ValueError, KeyError, TypeError):
        raise BenchInputError(f"{target.base_url}/v1/models: HTTP {models.status_code}, not an "
                              "OpenAI model list") from None
    return ServerFacts(ids, _version_of(version))


def _version_of(response: httpx.Response) -> str | None:
    if response.status_code != 200:
        return None
    try:
        value = response.json().get("version")
    except (ValueError, AttributeError):
        return None
    return None if value is None else str(value)


def choose_model(facts: ServerFacts, wanted: str | None) -> str:
    if wanted is not None:
        if wanted not in facts.model_ids:
            raise BenchInputError(f"--model {wanted!r}: the server serves "
                                  f"{', '.join(facts.model_ids) or 'no model'}")
        return wanted
    if not facts.model_ids:
        raise BenchInputError("the server lists no model at /v1/models")
    return facts.model_ids[0]


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    endpoint: str
    timeout_s: float
    max_concurrency: int | None = None


def replay(target: Target, plans: Sequence[RequestPlan], options: ReplayOptions,
           on_done: Callable[[RequestRecord], None] | None = None) -> list[RequestRecord]:
    """Send every plan at its time; the records in plan order."""
    return asyncio.run(_replay(target, plans, options, on_done or (lambda _: None)))


async def _replay(target: Target, plans: Sequence[RequestPlan], options: ReplayOptions,
                  on_done: Callable[[RequestRecord], None]) -> list[RequestRecord]:
    started_s = time.monotonic()

    def clock() -> float:
        return time.monotonic() - started_s

    cap = options.max_concurrency
    gate = asyncio.Semaphore(cap) if cap is not None else None
    limits = httpx.Limits(max_connections=cap, max_keepalive_connections=cap)
    timeout = httpx.Timeout(options.timeout_s, pool=None)
    async with httpx.AsyncClient(base_url=target.base_url, headers=target.headers(),
                                 timeout=timeout, limits=limits) as client:

        async def one(plan: RequestPlan) -> RequestRecord:
            await asyncio.sleep(max(0.0, plan.scheduled_s - clock()))
            async with gate if gate is not None else contextlib.nullcontext():
                record = await send(client, plan, options.endpoint, options.timeout_s, clock)
            on_done(record)
            return record

        return list(await asyncio.gather(*(one(plan) for plan in plans)))
