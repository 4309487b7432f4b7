"""Server-sent event bodies for streamed completions (final ``data: [DONE]``).

The generators own their request: when the client goes away mid-stream
(the generator is closed or cancelled) the request is aborted, which frees
its KV blocks at the next cut (0x0C)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

from pydantic import BaseModel

from iterserve.engine.streams import AsyncOutputStream, StreamEvent
from iterserve.model.tokenizer import TextTokenizer
from iterserve.runtime import Runtime
from iterserve.server.errors import error_body
from iterserve.server.protocol import (
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatDelta,
    ChatLogprobs,
    ChatTokenLogprob,
    CompletionChoice,
    CompletionLogprobs,
    CompletionResponse,
    Usage,
)
from iterserve.server.submit import openai_finish_reason


def sse(payload: BaseModel | str) -> str:
    data = payload if isinstance(payload, str) else payload.model_dump_json()
    return f"data: {data}\n\n"


def usage(num_prompt_tokens: int, num_completion_tokens: int) -> Usage:
    return Usage(prompt_tokens=num_prompt_tokens, completion_tokens=num_completion_tokens,
                 total_tokens=num_prompt_tokens + num_completion_tokens)


def completion_logprobs(tokenizer: TextTokenizer, token_ids: list[int] | tuple[int, ...],
                        logprobs: list[float] | tuple[float, ...]) -> CompletionLogprobs:
    return CompletionLogprobs(tokens=[tokenizer.decode([t]) for t in token_ids],
                              token_logprobs=list(logprobs))


def chat_logprobs(tokenizer: TextTokenizer, token_ids: list[int] | tuple[int, ...],
                  logprobs: list[float] | tuple[float, ...]) -> ChatLogprobs:
    return ChatLogprobs(content=[ChatTokenLogprob(token=tokenizer.decode([t]), logprob=lp)
                                 for t, lp in zip(token_ids, logprobs, strict=True)])


def ended_early_chunk(event: StreamEvent) -> str | None:
    """The error chunk sent after the final chunk of a stream the engine ended
    early (shutdown, an engine failure), vLLM's ``{"error": ...}`` shape: a
    client sees why, not only ``finish_reason: abort``."""
    if openai_finish_reason(event.finish_reason) != "abort":
        return None
    reason = event.reason or event.finish_reason
    return sse(json.dumps(error_body(503, f"the request was aborted by the engine ({reason})",
                                     code=str(event.finish_reason))))


async def _events(runtime: Runtime, request_id: str,
                  stream: AsyncOutputStream) -> AsyncIterator[StreamEvent]:
    finished = False
    try:
        async for event in stream:
            finished = event.is_final
            yield event
    finally:
        if not finished:
            runtime.engine.abort(request_id)


async def completion_stream(runtime: Runtime, request_id: str, stream: AsyncOutputStream,
                            num_prompt_tokens: int, include_usage: bool,
                            want_logprobs: bool) -> AsyncIterator[str]:
    created = int(time.time())
    num_tokens = 0
    async for event in _events(runtime, request_id, stream):
        num_tokens += len(event.token_ids)
        if not (event.text or event.token_ids or event.is_final):
            continue
        logprobs = completion_logprobs(runtime.tokenizer, event.token_ids, event.logprobs) \
            if want_logprobs else None
        choice = CompletionChoice(text=event.text, logprobs=logprobs,
                                  finish_reason=openai_finish_reason(event.finish_reason))
        yield sse(CompletionResponse(id=f"cmpl-{request_id}", created=created,
                                     model=runtime.model_name, choices=[choice]))
        if event.is_final and (error := ended_early_chunk(event)) is not None:
            yield error
    if include_usage:
        yield sse(CompletionResponse(id=f"cmpl-{request_id}", created=created,
                                     model=runtime.model_name, choices=[],
                                     usage=usage(num_prompt_tokens, num_tokens)))
    yield sse("[DONE]")


async def chat_stream(runtime: Runtime, request_id: str, stream: AsyncOutputStream,
                      num_prompt_tokens: int, include_usage: bool,
                      want_logprobs: bool) -> AsyncIterator[str]:
    created = int(time.time())

    def chunk(choices: list[ChatChunkChoice], usage_: Usage | None = None) -> str:
        return sse(ChatCompletionChunk(id=f"chatcmpl-{request_id}", created=created,
                                       model=runtime.model_name, choices=choices, usage=usage_))

    yield chunk([ChatChunkChoice(delta=ChatDelta(role="assistant", content=""))])
    num_tokens = 0
    async for event in _events(runtime, request_id, stream):
        num_tokens += len(event.token_ids)
        if not (event.text or event.token_ids or event.is_final):
            continue
        logprobs = chat_logprobs(runtime.tokenizer, event.token_ids, event.logprobs) \
            if want_logprobs and event.token_ids else None
        yield chunk([ChatChunkChoice(delta=ChatDelta(content=event.text), logprobs=logprobs,
                                     finish_reason=openai_finish_reason(event.finish_reason))])
        if event.is_final and (error := ended_early_chunk(event)) is not None:
            yield error
    if include_usage:
        yield chunk([], usage(num_prompt_tokens, num_tokens))
    yield sse("[DONE]")
