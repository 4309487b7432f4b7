"""Request bodies -> engine submissions, and engine streams -> outputs.

Validation that needs the model (token ids in the vocabulary, prompt +
max_tokens within ``max_model_len`` and the KV pool) happens here, before
the engine sees the request: a clear 400, never a stall. An overload
rejection (the arrival gate, 0x07) becomes 429 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from iterserve.engine.online import EngineClosed, RequestRefused
from iterserve.engine.online import Submission as EngineSubmission
from iterserve.engine.streams import AsyncOutputStream, LoopMailbox, StreamEvent
from iterserve.records.sampling_params import SamplingParams
from iterserve.records.spec import SloTargets
from iterserve.runtime import Runtime
from iterserve.server.errors import APIError
from iterserve.server.protocol import (
    MAX_CHOICES,
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    SamplingFields,
)

RETRY_AFTER_S = 1
DISCONNECT_POLL_S = 0.25
DEFAULT_CHAT_MAX_TOKENS = 256
DEFAULT_COMPLETION_MAX_TOKENS = 16
SEED_MODULUS = 2**63


@dataclass(frozen=True, slots=True)
class Submission:
    prompt_token_ids: tuple[int, ...]
    params: SamplingParams
    client_id: str
    priority: int
    slo: SloTargets | None
    waits_for: int | None = None  # the leader sample whose prompt blocks this one shares


@dataclass(slots=True)
class Generation:
    """One request's collected output."""

    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[tuple[tuple[int, float], ...]] = field(default_factory=list)
    prompt_logprobs: list[tuple[float, tuple[tuple[int, float], ...]]] = field(
        default_factory=list)
    finish_reason: str | None = None
    reason: str | None = None  # why the engine ended it early

    def add(self, event: StreamEvent) -> None:
        self.token_ids.extend(event.token_ids)
        self.text += event.text
        self.logprobs.extend(event.logprobs)
        self.top_logprobs.extend(event.top_logprobs)
        self.prompt_logprobs.extend(event.prompt_logprobs)
        self.finish_reason = event.finish_reason or self.finish_reason
        self.reason = event.reason or self.reason


def openai_finish_reason(reason: str | None) -> str | None:
    """stop / length as OpenAI names them; an ended-early request is ``abort``."""
    return reason if reason in (None, "stop", "length") else "abort"


def completion_prompts(body: CompletionRequest, runtime: Runtime) -> list[tuple[int, ...]]:
    """One token-id tuple per prompt: a string, a list of strings, one list
    of token ids, or a list of token-id lists (batched prompts)."""
    prompt = body.prompt
    if isinstance(prompt, str):
        return [_encoded(prompt, runtime, "prompt")]
    if prompt and isinstance(prompt[0], str):
        return [_encoded(str(p), runtime, f"prompt.{i}") for i, p in enumerate(prompt)]
    if prompt and isinstance(prompt[0], list):
        return [checked_ids(p, runtime, f"prompt.{i}") for i, p in enumerate(prompt)]
    return [checked_ids(prompt, runtime, "prompt")]


def _encoded(text: str, runtime: Runtime, param: str) -> tuple[int, ...]:
    if not text:
        raise APIError(400, "prompt is empty", param=param)
    return tuple(runtime.tokenizer.encode(text))


def checked_ids(prompt: Sequence[object], runtime: Runtime, param: str) -> tuple[int, ...]:
    ids = tuple(int(t) for t in prompt)  # type: ignore[call-overload]
    vocab = runtime.tokenizer.vocab_size
    bad = next((t for t in ids if t >= vocab), None)
    if bad is not None:
        raise APIError(400, f"prompt token id {bad} is outside the vocabulary (size {vocab})",
                       param=param)
    return ids


def template_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Messages as the chat template reads them: list-of-parts text content
    joined with newlines (as vLLM does), roles passed through to the
    template, tool metadata kept; a non-text part is a 400 naming it."""
    rendered = []
    for i, message in enumerate(messages):
        item: dict[str, Any] = {"role": message.role, "content": _text_of(message, i)}
        for key in ("name", "tool_call_id", "tool_calls"):
            value = getattr(message, key)
            if value is not None:
                item[key] = value
        rendered.append(item)
    return rendered


def _text_of(message: ChatMessage, index: int) -> str:
    content = message.content
    if content is None:
        if message.role == "assistant":  # an assistant turn that only called tools
            return ""
        raise APIError(400, f"messages.{index}.content is missing",
                       param=f"messages.{index}.content")
    if isinstance(content, str):
        return content
    texts = []
    for j, part in enumerate(content):
        if part.type != "text" or part.text is None:
            raise APIError(400, f"message content of type {part.type!r} is not supported "
                                "(text parts only)", param=f"messages.{index}.content.{j}.type")
        texts.append(part.text)
    return "\n".join(texts)


def chat_prompt(body: ChatCompletionRequest, runtime: Runtime) -> tuple[int, ...]:
    add_generation_prompt = body.add_generation_prompt is not False
    return render_chat(template_messages(body.messages), runtime, add_generation_prompt)


def render_chat(messages: list[dict[str, Any]], runtime: Runtime,
                add_generation_prompt: bool = True) -> tuple[int, ...]:
    try:
        return tuple(runtime.tokenizer.apply_chat_template(messages, add_generation_prompt))
    except ValueError as exc:
        raise APIError(400, f"messages cannot be rendered: {exc}", param="messages") from None


def sample_seed(seed: int | None, index: int) -> int | None:
    """Sample ``index`` of a request with ``n > 1``: the request's seed plus
    the index (sample 0 is the single-sample output), or the engine's own
    per-request seed when the request names none."""
    return None if seed is None else (seed + index) % SEED_MODULUS


def make_submission(body: SamplingFields, prompt_ids: tuple[int, ...], default_max_tokens: int,
                    client_id: str, sample_index: int = 0) -> Submission:
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    max_tokens = body.max_output_tokens
    num_top, wants_logprobs = _logprob_request(body)
    try:
        params = SamplingParams(
            max_tokens=max_tokens if max_tokens is not None else default_max_tokens,
            temperature=1.0 if body.temperature is None else body.temperature,
            top_k=body.top_k if body.top_k is not None and body.top_k > 0 else None,
            top_p=1.0 if body.top_p is None else body.top_p,
            seed=sample_seed(body.seed, sample_index), stop=stop,
            stop_token_ids=tuple(body.stop_token_ids or ()), ignore_eos=bool(body.ignore_eos),
            logprobs=wants_logprobs, num_top_logprobs=num_top,
            presence_penalty=body.presence_penalty or 0.0,
            frequency_penalty=body.frequency_penalty or 0.0,
            repetition_penalty=1.0 if body.repetition_penalty is None else body.repetition_penalty,
            min_tokens=body.min_tokens or 0,
            prompt_logprobs=isinstance(body, CompletionRequest) and bool(body.echo) and wants_logprobs)
    except ValueError as exc:  # SamplingParams names the field first in its message
        named = str(exc).split(" ", 1)[0]
        raise APIError(400, str(exc),
                       param=named if named in type(body).model_fields else None) from None
    slo = None
    if body.ttft_ms is not None or body.tbt_ms is not None:
        slo = SloTargets(body.ttft_ms, body.tbt_ms)
    return Submission(prompt_ids, params, client_id, body.priority or 0, slo)


def _logprob_request(body: SamplingFields) -> tuple[int, bool]:
    """(alternatives per token, whether logprobs are returned at all)."""
    if isinstance(body, CompletionRequest):
        return body.logprobs or 0, body.logprobs is not None
    if isinstance(body, ChatCompletionRequest):
        return (body.top_logprobs or 0) if body.logprobs else 0, bool(body.logprobs)
    return 0, False


def submissions(body: SamplingFields, prompts: Sequence[tuple[int, ...]], default_max_tokens: int,
                client_id: str, prefix_block_size: int | None = None) -> list[Submission]:
    """Every prompt times ``n`` samples, in OpenAI's choice order
    (choice index = prompt index * n + sample index). With prefix caching
    on (``prefix_block_size``: its rows per block), samples 1..n-1 of a
    prompt that fills a block wait for sample 0's prompt and share its full
    blocks (``shares_prompt``)."""
    n = body.num_choices_per_prompt
    if len(prompts) * n > MAX_CHOICES:
        raise APIError(400, f"{len(prompts)} prompts x n={n} exceeds {MAX_CHOICES} choices",
                       param="n")
    subs: list[Submission] = []
    for ids in prompts:
        leader = len(subs)
        for i in range(n):
            sub = make_submission(body, ids, default_max_tokens, client_id, i)
            if i and shares_prompt(sub, prefix_block_size):
                sub = dataclasses.replace(sub, waits_for=leader)
            subs.append(sub)
    return subs


def shares_prompt(sub: Submission, prefix_block_size: int | None) -> bool:
    """Whether a later sample should wait for sample 0's prompt: only when the
    prefix cache is on, the sample may reuse cached rows (prompt logprobs
    need every prompt row computed) and the prompt has a full block to share
    beyond the row every request computes itself (a hit leaves the last
    prompt row to compute)."""
    return prefix_block_size is not None and not sub.params.prompt_logprobs \
        and len(sub.prompt_token_ids) > prefix_block_size


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


async def start_all(runtime: Runtime, subs: Sequence[Submission],
                    mailboxes: Mailboxes | None = None,
                    on_submitted: Callable[[Sequence[str]], None] | None = None,
                    ) -> list[tuple[str, AsyncOutputStream]]:
    """Submit requests as one batch (one arrival instant) and wait until the
    arrival gate admitted every one; 429 (the others aborted) when it
    rejected any. Streams made through ``mailboxes`` share one loop wake-up
    per step. ``on_submitted`` hears the engine's request ids as soon as it
    took them (the access log notes them, a rejected request's too)."""
    loop = asyncio.get_running_loop()
    mailbox = None if mailboxes is None else mailboxes.current()
    streams = [AsyncOutputStream("", loop, mailbox) for _ in subs]
    try:
        request_ids, _ = runtime.engine.add_requests([
            EngineSubmission(sub.prompt_token_ids, sub.params, stream, sub.client_id,
                             sub.priority, sub.slo, sub.waits_for)
            for sub, stream in zip(subs, streams, strict=True)])
    except RequestRefused as exc:
        raise APIError(400, str(exc), param="max_tokens") from None
    except EngineClosed:
        raise APIError(503, "the server is shutting down") from None
    if on_submitted is not None:
        on_submitted(request_ids)
    try:
        firsts = await asyncio.gather(*(stream.next_event() for stream in streams))
        for first in firsts:
            _check_started(first)
    except BaseException:
        for request_id in request_ids:
            runtime.engine.abort(request_id)
        raise
    return list(zip(request_ids, streams, strict=True))


def _check_started(first: StreamEvent) -> None:
    if first.finish_reason == "rejected":
        raise APIError(429, f"the server is overloaded ({first.reason}); retry later",
                       code=first.reason, headers={"Retry-After": str(RETRY_AFTER_S)})
    if first.is_final:
        raise APIError(503, f"the request ended before it started ({first.reason})")


async def collect_all(runtime: Runtime, started: Sequence[tuple[str, AsyncOutputStream]],
                      is_disconnected: Callable[[], Awaitable[bool]]) -> list[Generation]:
    """Every started request's whole output, in order; one that fails aborts the rest."""
    tasks = [asyncio.ensure_future(collect(runtime, rid, stream, is_disconnected))
             for rid, stream in started]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        for request_id, _ in started:
            runtime.engine.abort(request_id)
        raise


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
