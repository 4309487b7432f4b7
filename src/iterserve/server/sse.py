"""Server-sent event bodies for streamed completions (final ``data: [DONE]``),
and the logprobs objects both endpoints return.

The generators own their requests: when the client goes away mid-stream
(the generator is closed or cancelled) every unfinished request is aborted,
which frees its KV blocks at the next cut (0x0C). A request with several
choices (``n > 1``, batched prompts) streams each choice's events as they
come, tagged with the choice index, as OpenAI does."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from iterserve.engine.streams import AsyncOutputStream, StreamEvent
from iterserve.model.tokenizer import TextTokenizer
from iterserve.runtime import Runtime
from iterserve.server.chunks import (
    ChunkHead,
    chat_chunk,
    completion_chunk,
    usage_chunk,
    usage_dict,
)
from iterserve.server.errors import error_body
from iterserve.server.responses import (
    ChatLogprobs,
    ChatTokenLogprob,
    CompletionLogprobs,
    TopLogprob,
    Usage,
)
from iterserve.server.submit import openai_finish_reason

Started = Sequence[tuple[str, AsyncOutputStream]]  # (request id, stream) per choice
TopLogprobs = Sequence[tuple[tuple[int, float], ...]]


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """What one streamed response carries besides the text."""

    num_prompt_tokens: int  # all prompts of the request, each counted once
    include_usage: bool = False
    continuous_usage: bool = False  # usage (so far) on every chunk, as vLLM's option
    want_logprobs: bool = False
    echo_texts: tuple[str, ...] = ()  # per choice, sent first (completions' echo)


def sse(data: str) -> str:
    return f"data: {data}\n\n"


def usage(num_prompt_tokens: int, num_completion_tokens: int) -> Usage:
    return Usage(prompt_tokens=num_prompt_tokens, completion_tokens=num_completion_tokens,
                 total_tokens=num_prompt_tokens + num_completion_tokens)


def completion_logprobs(tokenizer: TextTokenizer, token_ids: Sequence[int],
                        logprobs: Sequence[float], top: TopLogprobs = (),
                        first_offset: int = 0) -> CompletionLogprobs:
    """OpenAI's legacy shape: each token's text, logprob, character offset
    and a dict of alternatives (the sampled token and the top ones)."""
    tokens = [tokenizer.decode([t]) for t in token_ids]
    offsets, offset = [], first_offset
    for token in tokens:
        offsets.append(offset)
        offset += len(token)
    tops: list[dict[str, float] | None] = []
    for i, (token, logprob) in enumerate(zip(tokens, logprobs, strict=True)):
        alternatives = {tokenizer.decode([t]): lp for t, lp in (top[i] if i < len(top) else ())}
        alternatives.setdefault(token, logprob)
        tops.append(alternatives)
    return CompletionLogprobs(tokens=tokens, token_logprobs=list(logprobs), top_logprobs=tops,
                              text_offset=offsets)


def echoed_logprobs(tokenizer: TextTokenizer, prompt_ids: Sequence[int],
                    prompt_logprobs: Sequence[tuple[float, tuple[tuple[int, float], ...]]],
                    output: CompletionLogprobs) -> CompletionLogprobs:
    """``output`` preceded by the prompt's tokens (echo): the first prompt
    token has no logprob (``null``), as in OpenAI's and vLLM's responses."""
    prompt = completion_logprobs(tokenizer, prompt_ids[1:], [lp for lp, _ in prompt_logprobs],
                                 [alts for _, alts in prompt_logprobs])
    first = tokenizer.decode(prompt_ids[:1])
    offsets = [0] + [len(first) + o for o in prompt.text_offset]
    tokens = [first, *prompt.tokens]
    end = offsets[-1] + len(tokens[-1])
    return CompletionLogprobs(
        tokens=tokens + output.tokens,
        token_logprobs=[None, *prompt.token_logprobs, *output.token_logprobs],
        top_logprobs=[None, *(prompt.top_logprobs or []), *(output.top_logprobs or [])],
        text_offset=offsets + [end + o for o in output.text_offset])


def _top_logprob(tokenizer: TextTokenizer, token_id: int, logprob: float) -> TopLogprob:
    token = tokenizer.decode([token_id])
    return TopLogprob(token=token, logprob=logprob, bytes=list(token.encode("utf-8")))


def chat_logprobs(tokenizer: TextTokenizer, token_ids: Sequence[int], logprobs: Sequence[float],
                  top: TopLogprobs = ()) -> ChatLogprobs:
    content = []
    for i, (token_id, logprob) in enumerate(zip(token_ids, logprobs, strict=True)):
        sampled = _top_logprob(tokenizer, token_id, logprob)
        content.append(ChatTokenLogprob(
            token=sampled.token, logprob=logprob, bytes=sampled.bytes,
            top_logprobs=[_top_logprob(tokenizer, t, lp) for t, lp in
                          (top[i] if i < len(top) else ())]))
    return ChatLogprobs(content=content)


def ended_early_chunk(event: StreamEvent) -> str | None:
    """The error chunk sent after the final chunk of a stream the engine ended
    early (shutdown, an engine failure), vLLM's ``{"error": ...}`` shape: a
    client sees why, not only ``finish_reason: abort``."""
    if openai_finish_reason(event.finish_reason) != "abort":
        return None
    reason = event.reason or event.finish_reason
    return sse(json.dumps(error_body(503, f"the request was aborted by the engine ({reason})",
                                     code=str(event.finish_reason))))


def merged(first: StreamEvent, more: Sequence[StreamEvent]) -> StreamEvent:
    """``first`` and the events queued behind it as one event: their tokens,
    text, logprobs and times in order, the last one's ending. A consumer
    that fell behind sends one chunk for what it missed, as vLLM's server
    does, instead of one per token."""
    if not more:
        return first
    events = (first, *more)
    last = events[-1]
    return StreamEvent(
        first.request_id,
        token_ids=tuple(t for e in events for t in e.token_ids),
        text="".join(e.text for e in events),
        logprobs=tuple(lp for e in events for lp in e.logprobs),
        token_times_s=tuple(t for e in events for t in e.token_times_s),
        finish_reason=last.finish_reason, reason=last.reason,
        top_logprobs=tuple(top for e in events for top in e.top_logprobs),
        prompt_logprobs=next((e.prompt_logprobs for e in events if e.prompt_logprobs), ()))


async def _batches(stream: AsyncOutputStream) -> AsyncIterator[StreamEvent]:
    """The stream's events, those already queued behind one merged into it."""
    while True:
        event = await stream.next_event()
        event = merged(event, stream.take_ready())
        yield event
        if event.is_final:
            return


async def merged_events(runtime: Runtime,
                        started: Started) -> AsyncIterator[tuple[int, StreamEvent]]:
    """(choice index, event) as each choice's events arrive (each choice's
    queued events merged); the requests still running when the consumer
    stops are aborted."""
    finished: set[int] = set()
    if len(started) == 1:  # one choice: no fan-in task on the per-token path
        try:
            async for event in _batches(started[0][1]):
                if event.is_final:
                    finished.add(0)
                yield 0, event
        finally:
            _abort_unfinished(runtime, started, finished)
        return
    queue: asyncio.Queue[tuple[int, StreamEvent]] = asyncio.Queue()

    async def pump(index: int, stream: AsyncOutputStream) -> None:
        async for event in _batches(stream):
            queue.put_nowait((index, event))

    tasks = [asyncio.ensure_future(pump(i, stream)) for i, (_, stream) in enumerate(started)]
    try:
        while len(finished) < len(started):
            index, event = await queue.get()
            if event.is_final:
                finished.add(index)
            yield index, event
    finally:
        for task in tasks:
            task.cancel()
        _abort_unfinished(runtime, started, finished)


def _abort_unfinished(runtime: Runtime, started: Started, finished: set[int]) -> None:
    for index, (request_id, _) in enumerate(started):
        if index not in finished:
            runtime.engine.abort(request_id)


async def completion_stream(runtime: Runtime, started: Started,
                            settings: StreamSettings) -> AsyncIterator[bytes | str]:
    head = ChunkHead(f"cmpl-{started[0][0]}", "text_completion", int(time.time()),
                     runtime.model_name)
    num_tokens = 0
    offsets = [len(text) for text in settings.echo_texts] or [0] * len(started)
    for index, text in enumerate(settings.echo_texts):
        yield completion_chunk(head, index, text, usage=_so_far(settings, num_tokens))
    async for index, event in merged_events(runtime, started):
        num_tokens += len(event.token_ids)
        if not (event.text or event.token_ids or event.is_final):
            continue
        logprobs = None
        if settings.want_logprobs:
            logprobs = completion_logprobs(runtime.tokenizer, event.token_ids, event.logprobs,
                                           event.top_logprobs, offsets[index])
            offsets[index] += sum(len(t) for t in logprobs.tokens)
        yield completion_chunk(head, index, event.text, openai_finish_reason(event.finish_reason),
                               logprobs, _so_far(settings, num_tokens))
        if event.is_final and (error := ended_early_chunk(event)) is not None:
            yield error
    if settings.include_usage:
        yield usage_chunk(head, usage_dict(settings.num_prompt_tokens, num_tokens))
    yield sse("[DONE]")


def _so_far(settings: StreamSettings, num_tokens: int) -> dict[str, int] | None:
    return usage_dict(settings.num_prompt_tokens, num_tokens) \
        if settings.continuous_usage else None


async def chat_stream(runtime: Runtime, started: Started,
                      settings: StreamSettings) -> AsyncIterator[bytes | str]:
    head = ChunkHead(f"chatcmpl-{started[0][0]}", "chat.completion.chunk", int(time.time()),
                     runtime.model_name)
    for index in range(len(started)):
        yield chat_chunk(head, index, "", role="assistant", usage=_so_far(settings, 0))
    num_tokens = 0
    async for index, event in merged_events(runtime, started):
        num_tokens += len(event.token_ids)
        if not (event.text or event.token_ids or event.is_final):
            continue
        logprobs = chat_logprobs(runtime.tokenizer, event.token_ids, event.logprobs,
                                 event.top_logprobs) \
            if settings.want_logprobs and event.token_ids else None
        yield chat_chunk(head, index, event.text,
                         finish_reason=openai_finish_reason(event.finish_reason),
                         logprobs=logprobs, usage=_so_far(settings, num_tokens))
        if event.is_final and (error := ended_early_chunk(event)) is not None:
            yield error
    if settings.include_usage:
        yield usage_chunk(head, usage_dict(settings.num_prompt_tokens, num_tokens))
    yield sse("[DONE]")
