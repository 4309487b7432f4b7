"""The FastAPI app factory: OpenAI-compatible routes over one runtime.

No module state: everything a route needs is closed over from
:func:`create_app`'s arguments (the runtime, the settings, the metrics).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

import iterserve
from iterserve.runtime import Runtime
from iterserve.server import submit
from iterserve.server.connections import RequestGuard
from iterserve.server.errors import APIError, install_error_handlers
from iterserve.server.guard import Gatekeeper
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

_CLIENT_ID = re.compile(r"^[\x21-\x7e]{1,128}$")  # printable ASCII, no spaces
_ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 413, 429, 503)}


@dataclass(frozen=True, slots=True)
class ServerSettings:
    api_key: str | None = None
    max_body_bytes: int = 4 * 1024 * 1024
    body_timeout_s: float = 30.0  # a body not whole by then is answered 408


def client_identity(user: str | None, header: str | None) -> str:
    """The fairness identity (0x09A): ``user``, else ``X-Client-Id``, else anonymous."""
    client = user if user is not None else header
    if client is None:
        return "anonymous"
    if not _CLIENT_ID.match(client):
        raise APIError(400, "the client id (user / X-Client-Id) must be 1-128 printable "
                            "ASCII characters without spaces", param="user")
    return client


def create_app(runtime: Runtime, settings: ServerSettings | None = None,
               metrics: ServerMetrics | None = None) -> FastAPI:
    settings = settings or ServerSettings()
    metrics = metrics or ServerMetrics(runtime.engine)
    gate = Gatekeeper(runtime.engine, settings.api_key)
    app = FastAPI(title="iterserve", version=iterserve.__version__)
    app.state.gatekeeper = gate
    install_error_handlers(app)
    # outermost: the key is checked before a body byte is read (401 before a 400 about it)
    app.add_middleware(RequestGuard, api_key=settings.api_key,
                       max_body_bytes=settings.max_body_bytes,
                       body_timeout_s=settings.body_timeout_s,
                       is_draining=lambda: gate.is_draining)
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
