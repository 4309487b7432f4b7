"""Request bodies -> engine submissions, and engine streams -> outputs.

Validation that needs the model (token ids in the vocabulary, prompt +
max_tokens within ``max_model_len`` and the KV pool) happens here, before
the engine sees the request: a clear 400, never a stall. An overload
rejection (the arrival gate, 0x07) becomes 429 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from iterserve.engine.online import EngineClosed, RequestRefused
from iterserve.engine.streams import AsyncOutputStream, LoopMailbox, StreamEvent
from iterserve.records.sampling_params import SamplingParams
from iterserve.records.spec import SloTargets
from iterserve.runtime import Runtime
from iterserve.server.errors import APIError
from iterserve.server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    SamplingFields,
)

RETRY_AFTER_S = 1
DISCONNECT_POLL_S = 0.25
DEFAULT_CHAT_MAX_TOKENS = 256
DEFAULT_COMPLETION_MAX_TOKENS = 16


@dataclass(frozen=True, slots=True)
class Submission:
    prompt_token_ids: tuple[int, ...]
    params: SamplingParams
    client_id: str
    priority: int
    slo: SloTargets | None


@dataclass(slots=True)
class Generation:
    """One request's collected output."""

    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    reason: str | None = None  # why the engine ended it early

    def add(self, event: StreamEvent) -> None:
        self.token_ids.extend(event.token_ids)
        self.text += event.text
        self.logprobs.extend(event.logprobs)
        self.finish_reason = event.finish_reason or self.finish_reason
        self.reason = event.reason or self.reason


def openai_finish_reason(reason: str | None) -> str | None:
    """stop / length as OpenAI names them; an ended-early request is ``abort``."""
    return reason if reason in (None, "stop", "length") else "abort"


def completion_prompt(body: CompletionRequest, runtime: Runtime) -> tuple[int, ...]:
    prompt = body.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise APIError(400, "prompt is empty", param="prompt")
        return tuple(runtime.tokenizer.encode(prompt))
    ids = tuple(int(t) for t in prompt)
    vocab = runtime.tokenizer.vocab_size
    bad = next((t for t in ids if t >= vocab), None)
    if bad is not None:
        raise APIError(400, f"prompt token id {bad} is outside the vocabulary (size {vocab})",
                       param="prompt")
    return ids


def chat_prompt(body: ChatCompletionRequest, runtime: Runtime) -> tuple[int, ...]:
    messages = [{"role": m.role, "content": m.content} for m in body.messages]
    try:
        return tuple(runtime.tokenizer.apply_chat_template(messages))
    except ValueError as exc:
        raise APIError(400, f"messages cannot be rendered: {exc}", param="messages") from None


def make_submission(body: SamplingFields, prompt_ids: tuple[int, ...], max_tokens: int | None,
                    default_max_tokens: int, client_id: str) -> Submission:
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    try:
        params = SamplingParams(
            max_tokens=max_tokens if max_tokens is not None else default_max_tokens,
            temperature=1.0 if body.temperature is None else body.temperature,
            top_k=body.top_k, top_p=1.0 if body.top_p is None else body.top_p, seed=body.seed,
            stop=stop, ignore_eos=body.ignore_eos, logprobs=bool(getattr(body, "logprobs", False)))
    except ValueError as exc:
        raise APIError(400, str(exc)) from None
    slo = None
    if body.ttft_ms is not None or body.tbt_ms is not None:
        slo = SloTargets(body.ttft_ms, body.tbt_ms)
    return Submission(prompt_ids, params, client_id, body.priority, slo)


class Mailboxes:
    """The server's :class:`LoopMailbox`, made for the loop that serves it
    (one loop in practice; a new loop, e.g. a restarted test client, gets a
    fresh mailbox)."""

    def __init__(self) -> None:
        self._mailbox: LoopMailbox | None = None

    def current(self) -> LoopMailbox:
        loop = asyncio.get_running_loop()
        if self._mailbox is None or self._mailbox.loop is not loop:
            self._mailbox = LoopMailbox(loop)
        return self._mailbox


async def start(runtime: Runtime, sub: Submission,
                mailboxes: Mailboxes | None = None) -> tuple[str, AsyncOutputStream]:
    """Submit and wait until the arrival gate admitted it (429 otherwise).
    Streams made through ``mailboxes`` share one loop wake-up per step."""
    loop = asyncio.get_running_loop()
    stream = AsyncOutputStream("", loop, None if mailboxes is None else mailboxes.current())
    try:
        request_id = runtime.engine.add_request(
            sub.prompt_token_ids, sub.params, stream, client_id=sub.client_id,
            priority=sub.priority, slo=sub.slo)
    except RequestRefused as exc:
        raise APIError(400, str(exc), param="max_tokens") from None
    except EngineClosed:
        raise APIError(503, "the server is shutting down") from None
    try:
        first = await stream.next_event()
    except BaseException:
        runtime.engine.abort(request_id)
        raise
    if first.finish_reason == "rejected":
        raise APIError(429, f"the server is overloaded ({first.reason}); retry later",
                       code=first.reason, headers={"Retry-After": str(RETRY_AFTER_S)})
    if first.is_final:
        raise APIError(503, f"the request ended before it started ({first.reason})")
    return request_id, stream


async def collect(runtime: Runtime, request_id: str, stream: AsyncOutputStream,
                  is_disconnected: Callable[[], Awaitable[bool]]) -> Generation:
    """The whole output; a client that goes away meanwhile aborts the request."""
    out = Generation()
    gather = asyncio.ensure_future(_gather(stream, out))
    try:
        while not gather.done():
            await asyncio.wait({gather}, timeout=DISCONNECT_POLL_S)
            if not gather.done() and await is_disconnected():
                raise APIError(400, "the client disconnected")
    except BaseException:
        gather.cancel()
        runtime.engine.abort(request_id)
        raise
    if out.finish_reason == "aborted":  # shutdown or an engine failure: this request only
        raise APIError(503, f"the request was aborted by the engine ({out.reason})")
    return out


async def _gather(stream: AsyncOutputStream, out: Generation) -> None:
    async for event in stream:
        out.add(event)
