"""The bytes of one streamed chunk, written without building pydantic models.

A streamed response sends one chunk per token batch, so at 64 streams the
event loop encodes hundreds of chunks a second on the cores the model runs
on. Building ``CompletionResponse`` / ``ChatCompletionChunk`` (and their
choice, delta and usage models) and dumping them costs tens of
microseconds a chunk; the plain dicts below, dumped by orjson, cost about
two. The pydantic models in :mod:`iterserve.server.responses` stay the
schema: these dicts hold the same fields in the same order, and a test
checks the bytes equal ``model_dump_json``'s for every kind of chunk.
Logprobs, when asked for, are dumped through their own model.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from iterserve.server.responses import ChatLogprobs, CompletionLogprobs


@dataclass(frozen=True, slots=True)
class ChunkHead:
    """The fields every chunk of one response repeats."""

    response_id: str
    object: str  # "text_completion" | "chat.completion.chunk"
    created: int
    model: str


def sse_bytes(data: dict[str, object]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


def usage_dict(num_prompt_tokens: int, num_completion_tokens: int) -> dict[str, int]:
    """``Usage``'s fields, in its order."""
    return {"prompt_tokens": num_prompt_tokens, "completion_tokens": num_completion_tokens,
            "total_tokens": num_prompt_tokens + num_completion_tokens}


def _chunk(head: ChunkHead, choices: list[dict[str, object]],
           usage: dict[str, int] | None) -> bytes:
    return sse_bytes({"id": head.response_id, "object": head.object, "created": head.created,
                      "model": head.model, "choices": choices, "usage": usage})


def completion_chunk(head: ChunkHead, index: int, text: str, finish_reason: str | None = None,
                     logprobs: CompletionLogprobs | None = None,
                     usage: dict[str, int] | None = None) -> bytes:
    """A ``CompletionResponse`` with one choice, as ``data: {model_dump_json()}``."""
    choice = {"index": index, "text": text, "finish_reason": finish_reason,
              "logprobs": None if logprobs is None else logprobs.model_dump()}
    return _chunk(head, [choice], usage)


def chat_chunk(head: ChunkHead, index: int, content: str | None, role: str | None = None,
               finish_reason: str | None = None, logprobs: ChatLogprobs | None = None,
               usage: dict[str, int] | None = None) -> bytes:
    """A ``ChatCompletionChunk`` with one choice, as ``data: {model_dump_json()}``."""
    choice = {"index": index, "delta": {"role": role, "content": content},
              "finish_reason": finish_reason,
              "logprobs": None if logprobs is None else logprobs.model_dump()}
    return _chunk(head, [choice], usage)


def usage_chunk(head: ChunkHead, usage: dict[str, int]) -> bytes:
    """The last chunk of ``include_usage``: no choices, the totals."""
    return _chunk(head, [], usage)
