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
from functools import partial

from fastapi import FastAPI, Header, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse

import iterserve
from iterserve.runtime import Runtime
from iterserve.server import submit
from iterserve.server.access_log import AccessLog, note_requests
from iterserve.server.client_labels import DEFAULT_MAX_CLIENT_LABELS
from iterserve.server.connections import RequestGuard
from iterserve.server.errors import APIError, install_error_handlers
from iterserve.server.fields import FieldPolicy
from iterserve.server.guard import Gatekeeper
from iterserve.server.metrics import ServerMetrics
from iterserve.server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
)
from iterserve.server.responses import (
    AssistantMessage,
    ChatChoice,
    ChatCompletionResponse,
    CompletionChoice,
    CompletionResponse,
    DetokenizeResponse,
    ErrorResponse,
    Health,
    ModelCard,
    ModelList,
    TokenizeResponse,
    Version,
)
from iterserve.server.sse import (
    StreamSettings,
    chat_logprobs,
    chat_stream,
    completion_logprobs,
    completion_stream,
    echoed_logprobs,
    usage,
)
from iterserve.server.stats_log import StatsLine, log_stats

_CLIENT_ID = re.compile(r"^[\x21-\x7e]{1,128}$")  # printable ASCII, no spaces
_ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 429, 503)}


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
    strict_fields: bool = False  # unknown request fields are a 400 instead of ignored
    body_timeout_s: float = 30.0  # a body not whole by then is answered 408

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
    # the key is checked before a body byte is read (401 before a 400 about it)
    app.add_middleware(RequestGuard, api_key=settings.api_key,
                       max_body_bytes=settings.max_body_bytes,
                       body_timeout_s=settings.body_timeout_s,
                       is_draining=lambda: gate.is_draining)
    if settings.allowed_origins:  # a preflight is answered before any route or key check
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.allowed_origins),
                           allow_methods=list(settings.allowed_methods),
                           allow_headers=list(settings.allowed_headers))
    app.add_middleware(AccessLog, take_summary=metrics.observer.take_summary)  # outermost
    created = int(time.time())
    mailboxes = submit.Mailboxes()  # one loop wake-up per engine step for all streams

    fields = FieldPolicy(settings.strict_fields)
    app.state.fields = fields  # fields.ignored: requests per ignored field name (a Counter)
    metrics.watch_ignored_fields(fields.ignored)

    def check_model(name: str | None) -> None:
        if name is not None and name != runtime.model_name:
            raise APIError(404, f"the model {name!r} does not exist; this server serves "
                                f"{runtime.model_name!r}", param="model", code="model_not_found")

    def stream_settings(body: CompletionRequest | ChatCompletionRequest, num_prompt_tokens: int,
                        want_logprobs: bool, echo_texts: tuple[str, ...] = ()) -> StreamSettings:
        options = body.stream_options
        return StreamSettings(num_prompt_tokens, bool(options and options.include_usage),
                              bool(options and options.continuous_usage_stats), want_logprobs,
                              echo_texts)

    @app.post("/v1/completions", response_model=CompletionResponse, responses=_ERRORS)
    async def completions(body: CompletionRequest, request: Request,
                          x_client_id: str | None = Header(default=None)) -> Response:
        gate.admit(request)
        check_model(body.model)
        fields.check(body)
        client = client_identity(body.user, x_client_id)
        prompts = submit.completion_prompts(body, runtime)
        subs = submit.submissions(body, prompts, submit.DEFAULT_COMPLETION_MAX_TOKENS, client,
                                  runtime.executor.prefix_block_size)
        n = body.num_choices_per_prompt
        echo_texts = tuple(echo_text(body, runtime, prompts, i // n) for i in range(len(subs))) \
            if body.echo else ()
        want_logprobs = body.logprobs is not None
        num_prompt_tokens = sum(len(ids) for ids in prompts)
        started = await submit.start_all(runtime, subs, mailboxes,
                                         partial(note_requests, request, client=client))
        if body.wants_stream:
            settings_ = stream_settings(body, num_prompt_tokens, want_logprobs, echo_texts)
            return StreamingResponse(completion_stream(runtime, started, settings_),
                                     media_type="text/event-stream")
        outs = await submit.collect_all(runtime, started, request.is_disconnected)
        num_tokens = sum(len(out.token_ids) for out in outs)
        return JSONResponse(CompletionResponse(
            id=f"cmpl-{started[0][0]}", created=int(time.time()), model=runtime.model_name,
            choices=completion_choices(runtime, outs, echo_texts, want_logprobs,
                                       [prompts[i // n] for i in range(len(outs))]),
            usage=usage(num_prompt_tokens, num_tokens)).model_dump())

    @app.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=_ERRORS)
    async def chat(body: ChatCompletionRequest, request: Request,
                   x_client_id: str | None = Header(default=None)) -> Response:
        gate.admit(request)
        check_model(body.model)
        fields.check(body)
        client = client_identity(body.user, x_client_id)
        ids = submit.chat_prompt(body, runtime)
        subs = submit.submissions(body, [ids], submit.DEFAULT_CHAT_MAX_TOKENS, client,
                                  runtime.executor.prefix_block_size)
        started = await submit.start_all(runtime, subs, mailboxes,
                                         partial(note_requests, request, client=client))
        want_logprobs = bool(body.logprobs)
        if body.wants_stream:
            return StreamingResponse(
                chat_stream(runtime, started, stream_settings(body, len(ids), want_logprobs)),
                media_type="text/event-stream")
        outs = await submit.collect_all(runtime, started, request.is_disconnected)
        choices = [ChatChoice(
            index=index, message=AssistantMessage(content=out.text),
            logprobs=chat_logprobs(runtime.tokenizer, out.token_ids, out.logprobs,
                                   out.top_logprobs) if want_logprobs else None,
            finish_reason=submit.openai_finish_reason(out.finish_reason))
            for index, out in enumerate(outs)]
        num_tokens = sum(len(out.token_ids) for out in outs)
        return JSONResponse(ChatCompletionResponse(
            id=f"chatcmpl-{started[0][0]}", created=int(time.time()), model=runtime.model_name,
            choices=choices, usage=usage(len(ids), num_tokens)).model_dump())

    def card() -> ModelCard:
        return ModelCard(id=runtime.model_name, created=created, root=runtime.model_name,
                         max_model_len=runtime.max_model_len)

    @app.get("/v1/models", response_model=ModelList, responses=_ERRORS)
    async def models(request: Request) -> ModelList:
        gate.check_key(request)
        return ModelList(data=[card()])

    @app.get("/v1/models/{model_id:path}", response_model=ModelCard, responses=_ERRORS)
    async def model(model_id: str, request: Request) -> ModelCard:
        gate.check_key(request)
        check_model(model_id)
        return card()

    @app.post("/tokenize", response_model=TokenizeResponse, responses=_ERRORS)
    async def tokenize(body: TokenizeRequest, request: Request) -> TokenizeResponse:
        gate.check_key(request)
        check_model(body.model)
        fields.check(body)
        ids = tokenize_body(body, runtime)
        strs = [runtime.tokenizer.decode([t], False) for t in ids] \
            if body.return_token_strs else None
        return TokenizeResponse(count=len(ids), max_model_len=runtime.max_model_len,
                                tokens=list(ids), token_strs=strs)

    @app.post("/detokenize", response_model=DetokenizeResponse, responses=_ERRORS)
    async def detokenize(body: DetokenizeRequest, request: Request) -> DetokenizeResponse:
        gate.check_key(request)
        check_model(body.model)
        fields.check(body)
        ids = submit.checked_ids(body.tokens, runtime, "tokens")
        return DetokenizeResponse(prompt=runtime.tokenizer.decode(ids))

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


def completion_choices(runtime: Runtime, outs: list[submit.Generation],
                       echo_texts: tuple[str, ...], want_logprobs: bool,
                       prompts: list[tuple[int, ...]]) -> list[CompletionChoice]:
    choices = []
    for index, out in enumerate(outs):
        echoed = echo_texts[index] if echo_texts else ""
        logprobs = completion_logprobs(runtime.tokenizer, out.token_ids, out.logprobs,
                                       out.top_logprobs) if want_logprobs else None
        if logprobs is not None and echoed:
            logprobs = echoed_logprobs(runtime.tokenizer, prompts[index], out.prompt_logprobs,
                                       logprobs)
        choices.append(CompletionChoice(
            index=index, text=echoed + out.text, logprobs=logprobs,
            finish_reason=submit.openai_finish_reason(out.finish_reason)))
    return choices


def echo_text(body: CompletionRequest, runtime: Runtime, prompts: list[tuple[int, ...]],
              index: int) -> str:
    """Prompt ``index`` as echoed before its choices: the string sent, or
    its token ids decoded."""
    prompt = body.prompt
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt[index], str):
        return str(prompt[index])
    return runtime.tokenizer.decode(prompts[index])


def tokenize_body(body: TokenizeRequest, runtime: Runtime) -> tuple[int, ...]:
    """vLLM's /tokenize: exactly one of ``prompt`` and ``messages``."""
    if (body.prompt is None) == (body.messages is None):
        raise APIError(400, "send exactly one of prompt and messages", param="prompt")
    if body.messages is not None:
        return submit.render_chat(submit.template_messages(body.messages), runtime,
                                  body.add_generation_prompt is not False)
    add_special_tokens = body.add_special_tokens is not False
    return tuple(runtime.tokenizer.encode(body.prompt or "", add_special_tokens))
