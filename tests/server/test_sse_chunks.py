"""Streamed chunks: the orjson-written bytes equal pydantic's dump of the
response models for every kind of chunk, and a consumer that fell behind
sends the events queued for it as one chunk with the same text."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from iterserve.engine.streams import AsyncOutputStream, StreamEvent
from iterserve.server.chunks import ChunkHead, chat_chunk, completion_chunk, usage_chunk
from iterserve.server.responses import (
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatDelta,
    ChatLogprobs,
    ChatTokenLogprob,
    CompletionChoice,
    CompletionLogprobs,
    CompletionResponse,
    TopLogprob,
    Usage,
)
from iterserve.server.sse import StreamSettings, chat_stream, completion_stream, merged

TEXTS = ["", " hello", 'quote " back \\ slash', "new\nline\ttab\x01\x1f", "caf\u00e9 \u2028 \U0001F600"]
USAGES = [None, (128, 0), (7, 5)]
HEAD = ChunkHead("cmpl-r1", "text_completion", 1_700_000_000, "bench")
CHAT_HEAD = ChunkHead("chatcmpl-r1", "chat.completion.chunk", 1_700_000_000, "bench")


def _usage(pair: tuple[int, int] | None) -> tuple[Usage | None, dict[str, int] | None]:
    if pair is None:
        return None, None
    model = Usage(prompt_tokens=pair[0], completion_tokens=pair[1], total_tokens=sum(pair))
    return model, model.model_dump()


def _pydantic(model: CompletionResponse | ChatCompletionChunk) -> bytes:
    return f"data: {model.model_dump_json()}\n\n".encode()


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("finish", [None, "stop", "length", "abort"])
@pytest.mark.parametrize("pair", USAGES)
def test_completion_chunk_bytes_equal_pydantic(text: str, finish: str | None,
                                               pair: tuple[int, int] | None) -> None:
    model_usage, usage = _usage(pair)
    expected = CompletionResponse(id=HEAD.response_id, created=HEAD.created, model=HEAD.model,
                                  choices=[CompletionChoice(index=2, text=text,
                                                            finish_reason=finish)],
                                  usage=model_usage)
    assert completion_chunk(HEAD, 2, text, finish, usage=usage) == _pydantic(expected)


def test_completion_chunk_with_logprobs_equals_pydantic() -> None:
    logprobs = CompletionLogprobs(tokens=["a", " b"], token_logprobs=[-0.1, -1e-05],
                                  top_logprobs=[{"a": -0.1, "c": -2.5}, None], text_offset=[3, 4])
    expected = CompletionResponse(id=HEAD.response_id, created=HEAD.created, model=HEAD.model,
                                  choices=[CompletionChoice(text="a b", logprobs=logprobs)])
    assert completion_chunk(HEAD, 0, "a b", logprobs=logprobs) == _pydantic(expected)


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("finish", [None, "stop"])
@pytest.mark.parametrize("pair", USAGES)
def test_chat_chunk_bytes_equal_pydantic(text: str, finish: str | None,
                                         pair: tuple[int, int] | None) -> None:
    model_usage, usage = _usage(pair)
    expected = ChatCompletionChunk(
        id=CHAT_HEAD.response_id, created=CHAT_HEAD.created, model=CHAT_HEAD.model,
        choices=[ChatChunkChoice(index=1, delta=ChatDelta(content=text), finish_reason=finish)],
        usage=model_usage)
    assert chat_chunk(CHAT_HEAD, 1, text, finish_reason=finish, usage=usage) == \
        _pydantic(expected)


def test_chat_role_chunk_logprobs_and_usage_chunk_equal_pydantic() -> None:
    role = ChatCompletionChunk(id=CHAT_HEAD.response_id, created=CHAT_HEAD.created,
                               model=CHAT_HEAD.model, choices=[ChatChunkChoice(
                                   delta=ChatDelta(role="assistant", content=""))])
    assert chat_chunk(CHAT_HEAD, 0, "", role="assistant") == _pydantic(role)
    logprobs = ChatLogprobs(content=[ChatTokenLogprob(
        token="\u00e9", logprob=-0.25, bytes=[195, 169],
        top_logprobs=[TopLogprob(token="x", logprob=-3.0, bytes=[120])])])
    scored = ChatCompletionChunk(id=CHAT_HEAD.response_id, created=CHAT_HEAD.created,
                                 model=CHAT_HEAD.model, choices=[ChatChunkChoice(
                                     delta=ChatDelta(content="\u00e9"), logprobs=logprobs)])
    assert chat_chunk(CHAT_HEAD, 0, "\u00e9", logprobs=logprobs) == _pydantic(scored)
    model_usage, usage = _usage((9, 4))
    assert usage is not None
    totals = CompletionResponse(id=HEAD.response_id, created=HEAD.created, model=HEAD.model,
                                choices=[], usage=model_usage)
    assert usage_chunk(HEAD, usage) == _pydantic(totals)


def _token(i: int, text: str, finish: str | None = None) -> StreamEvent:
    return StreamEvent("r1", (i,), text, (-0.5 * i,), (0.01 * i,), finish,
                       top_logprobs=(((i, -0.5 * i),),))


def test_merged_joins_queued_events_in_order() -> None:
    first = _token(1, "a")
    assert merged(first, []) is first
    joined = merged(first, [_token(2, "b"), StreamEvent("r1", text="c", finish_reason="stop")])
    assert joined.token_ids == (1, 2)
    assert joined.text == "abc"
    assert joined.logprobs == (-0.5, -1.0)
    assert joined.token_times_s == (0.01, 0.02)
    assert joined.top_logprobs == (((1, -0.5),), ((2, -1.0),))
    assert joined.finish_reason == "stop" and joined.is_final


def test_take_ready_returns_what_is_queued_without_waiting() -> None:
    async def scenario() -> tuple[StreamEvent, list[StreamEvent], list[StreamEvent]]:
        stream = AsyncOutputStream("r1", asyncio.get_running_loop())
        stream.put_now([_token(1, "a"), _token(2, "b"), _token(3, "c")])
        return await stream.next_event(), stream.take_ready(), stream.take_ready()

    first, ready, after = asyncio.run(scenario())
    assert first.token_ids == (1,)
    assert [e.token_ids for e in ready] == [(2,), (3,)]
    assert after == []


def _runtime() -> SimpleNamespace:
    aborted: list[str] = []
    return SimpleNamespace(model_name="bench", tokenizer=None, aborted=aborted,
                           engine=SimpleNamespace(abort=aborted.append))


def _stream_body(stream_fn, events_now: list[StreamEvent],  # type: ignore[no-untyped-def]
                 events_later: list[StreamEvent], settings: StreamSettings) -> list[dict]:
    """The chunks ``stream_fn`` sends when ``events_now`` are queued before
    it starts and each of ``events_later`` arrives while it waits."""
    async def scenario() -> list[bytes | str]:
        stream = AsyncOutputStream("r1", asyncio.get_running_loop())
        stream.put_now(events_now)
        body = []
        agen = stream_fn(runtime, [("r1", stream)], settings)
        async for chunk in agen:
            body.append(chunk)
            if events_later:
                stream.put_now([events_later.pop(0)])
        return body

    runtime = _runtime()
    body = asyncio.run(scenario())
    assert runtime.aborted == []
    text = [c.decode() if isinstance(c, bytes) else c for c in body]
    assert text[-1] == "data: [DONE]\n\n"
    return [json.loads(c.removeprefix("data: ")) for c in text[:-1]]


def test_a_lagging_completion_stream_sends_one_chunk_with_the_same_text() -> None:
    events = [_token(1, "Hel"), _token(2, "lo"), _token(3, " world", "length")]
    settings = StreamSettings(num_prompt_tokens=4, include_usage=True, continuous_usage=True)
    lagging = _stream_body(completion_stream, list(events), [], settings)
    assert [c["choices"][0]["text"] for c in lagging[:-1]] == ["Hello world"]
    assert lagging[0]["choices"][0]["finish_reason"] == "length"
    assert lagging[0]["usage"]["completion_tokens"] == 3
    assert lagging[-1]["choices"] == [] and lagging[-1]["usage"]["completion_tokens"] == 3
    prompt = _stream_body(completion_stream, events[:1], list(events[1:]), settings)
    assert [c["choices"][0]["text"] for c in prompt[:-1]] == ["Hel", "lo", " world"]
    assert [c["usage"]["completion_tokens"] for c in prompt] == [1, 2, 3, 3]


def test_a_lagging_chat_stream_sends_the_role_then_one_chunk() -> None:
    events = [_token(1, "Hi"), _token(2, " there", "stop")]
    chunks = _stream_body(chat_stream, events, [], StreamSettings(num_prompt_tokens=2))
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": ""}, {"role": None, "content": "Hi there"}]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
