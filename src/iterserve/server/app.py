"""The FastAPI app factory: OpenAI-compatible routes over one runtime.

No module state: everything a route needs is closed over from
:func:`create_app`'s arguments (the runtime, the settings, the metrics).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass

from fastapi import FastAPI, Header, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse

import iterserve
from iterserve.runtime import Runtime
from iterserve.server import submit
from iterserve.server.access_log import AccessLog, note_request
from iterserve.server.client_labels import DEFAULT_MAX_CLIENT_LABELS
from iterserve.server.errors import APIError, install_error_handlers
from iterserve.server.guard import BodyLimit, Gatekeeper
from iterserve.server.metrics import ServerMetrics
from iterserve.server.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    ErrorResponse,
    Health,
    ModelCard,
    ModelList,
    Version,
)
from iterserve.server.sse import (
    chat_logprobs,
    chat_stream,
    completion_logprobs,
    completion_stream,
    usage,
)
from iterserve.server.stats_log import StatsLine, log_stats

_CLIENT_ID = re.compile(r"^[\x21-\x7e]{1,128}$")  # printable ASCII, no spaces
_ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 413, 429, 503)}


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """``allowed_origins`` empty: no CORS headers (browsers refuse cross-origin
    calls); ``stats_interval_s`` 0: no periodic stats line."""

    api_key: str | None = None
    max_body_bytes: int = 4 * 1024 * 1024
    max_client_labels: int = DEFAULT_MAX_CLIENT_LABELS
    allowed_origins: tuple[str, ...] = ()
    allowed_methods: tuple[str, ...] = ("*",)
    allowed_headers: tuple[str, ...] = ("*",)
    stats_interval_s: float = 10.0

    def __post_init__(self) -> None:
        if self.max_client_labels < 0:
            raise ValueError(f"max_client_labels must be >= 0, got {self.max_client_labels}")
        if not self.stats_interval_s >= 0:
            raise ValueError(f"stats_interval_s must be >= 0, got {self.stats_interval_s}")


def client_identity(user: str | None, header: str | None) -> str:
    """The fairness identity (0x09A): ``user``, else ``X-Client-Id``, else anonymous."""
    client = user if user is not None else header
    if client is None:
        return "anonymous"
    if not _CLIENT_ID.match(client):
        raise APIError(400, "the client id (user / X-Client-Id) must be 1-128 printable "
                            "ASCII characters without spaces", param="user")
    return client


def _stats_lifespan(metrics: ServerMetrics, interval_s: float
                    ) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the periodic stats line runs while the app does."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = None
        if interval_s > 0:
            task = asyncio.create_task(log_stats(StatsLine(lambda: metrics.snapshot),
                                                 interval_s))
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task

    return lifespan


def create_app(runtime: Runtime, settings: ServerSettings | None = None,
               metrics: ServerMetrics | None = None) -> FastAPI:
    settings = settings or ServerSettings()
    metrics = metrics or ServerMetrics(runtime.engine, runtime.model_name,
                                       settings.max_client_labels)
    gate = Gatekeeper(runtime.engine, settings.api_key)
    app = FastAPI(title="iterserve", version=iterserve.__version__,
                  lifespan=_stats_lifespan(metrics, settings.stats_interval_s))
    app.state.gatekeeper = gate
    app.state.metrics = metrics
    install_error_handlers(app)
    app.add_middleware(BodyLimit, max_body_bytes=settings.max_body_bytes)
    if settings.allowed_origins:  # a preflight is answered before any route or key check
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.allowed_origins),
                           allow_methods=list(settings.allowed_methods),
                           allow_headers=list(settings.allowed_headers))
    app.add_middleware(AccessLog, take_summary=metrics.observer.take_summary)  # outermost
    created = int(time.time())
    mailboxes = submit.Mailboxes()  # one loop wake-up per engine step for all streams

    def check_model(name: str) -> None:
        if name != runtime.model_name:
            raise APIError(404, f"the model {name!r} does not exist; this server serves "
                                f"{runtime.model_name!r}", param="model", code="model_not_found")

    @app.post("/v1/completions", response_model=CompletionResponse, responses=_ERRORS)
    async def completions(body: CompletionRequest, request: Request,
                          x_client_id: str | None = Header(default=None)) -> Response:
        gate.admit(request)
        check_model(body.model)
        client = client_identity(body.user, x_client_id)
        ids = submit.completion_prompt(body, runtime)
        sub = submit.make_submission(body, ids, body.max_tokens,
                                     submit.DEFAULT_COMPLETION_MAX_TOKENS, client)
        request_id, stream = await submit.start(runtime, sub, mailboxes)
        note_request(request, request_id, client)
        want_logprobs = body.logprobs is not None
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        if body.stream:
            return StreamingResponse(completion_stream(runtime, request_id, stream, len(ids),
                                                       include_usage, want_logprobs),
                                     media_type="text/event-stream")
        out = await submit.collect(runtime, request_id, stream, request.is_disconnected)
        logprobs = completion_logprobs(runtime.tokenizer, out.token_ids, out.logprobs) \
            if want_logprobs else None
        choice = CompletionChoice(text=out.text, logprobs=logprobs,
                                  finish_reason=submit.openai_finish_reason(out.finish_reason))
        return JSONResponse(CompletionResponse(
            id=f"cmpl-{request_id}", created=int(time.time()), model=runtime.model_name,
            choices=[choice], usage=usage(len(ids), len(out.token_ids))).model_dump())

    @app.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=_ERRORS)
    async def chat(body: ChatCompletionRequest, request: Request,
                   x_client_id: str | None = Header(default=None)) -> Response:
        gate.admit(request)
        check_model(body.model)
        client = client_identity(body.user, x_client_id)
        ids = submit.chat_prompt(body, runtime)
        max_tokens = body.max_completion_tokens or body.max_tokens
        sub = submit.make_submission(body, ids, max_tokens, submit.DEFAULT_CHAT_MAX_TOKENS,
                                     client)
        request_id, stream = await submit.start(runtime, sub, mailboxes)
        note_request(request, request_id, client)
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        if body.stream:
            return StreamingResponse(chat_stream(runtime, request_id, stream, len(ids),
                                                 include_usage, body.logprobs),
                                     media_type="text/event-stream")
        out = await submit.collect(runtime, request_id, stream, request.is_disconnected)
        logprobs = chat_logprobs(runtime.tokenizer, out.token_ids, out.logprobs) \
            if body.logprobs else None
        choice = ChatChoice(message=AssistantMessage(content=out.text), logprobs=logprobs,
                            finish_reason=submit.openai_finish_reason(out.finish_reason))
        return JSONResponse(ChatCompletionResponse(
            id=f"chatcmpl-{request_id}", created=int(time.time()), model=runtime.model_name,
            choices=[choice], usage=usage(len(ids), len(out.token_ids))).model_dump())

    @app.get("/v1/models", response_model=ModelList, responses=_ERRORS)
    async def models(request: Request) -> ModelList:
        gate.check_key(request)
        return ModelList(data=[ModelCard(id=runtime.model_name, created=created,
                                         max_model_len=runtime.max_model_len)])

    @app.get("/health", response_model=Health, responses={503: {"model": Health}})
    async def health() -> Response:
        if gate.is_draining:
            return JSONResponse(Health(status="draining").model_dump(), status_code=503)
        return JSONResponse(Health(status="ok").model_dump())

    @app.get("/version", response_model=Version)
    async def version() -> Version:
        return Version(version=iterserve.__version__)

    @app.get("/metrics", response_class=Response)
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    return app
