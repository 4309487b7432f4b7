"""One streamed request against an OpenAI-compatible server, recorded in full.

Nothing here is iterserve-specific: chunks are read as OpenAI sends them
(``data: {...}`` lines, ``data: [DONE]`` last), a ``role``-only first chat
chunk carries no token, ``usage`` may come in a final chunk or never, and an
``error`` object inside the stream ends the request as an error.

Tokens per chunk: the length of the chunk's logprobs (``logprobs.tokens`` on
completions, ``logprobs.content`` on chat) when the server returns them,
else one per chunk with non-empty text. The arrival time of every chunk is
kept, so each token gets the time its chunk arrived (tokens that share a
chunk share a time: that is what the client saw).

Outcomes: ``finished`` (finish_reason stop / length with at least one
token), ``rejected`` (HTTP 429; ``Retry-After`` kept), ``http_error`` (any
other non-200 status), ``connection_error``, ``timeout`` (the whole request
past ``timeout_s``), ``aborted`` (a 200 stream that ended without a
stop / length finish, or with an error object).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from iterserve.lab.bench_plan import ENDPOINTS, RequestPlan

OUTCOMES = ("finished", "rejected", "http_error", "connection_error", "timeout", "aborted")
_FINISHED_REASONS = ("stop", "length")
_MAX_ERROR_CHARS = 300


@dataclass(slots=True)
class RequestRecord:
    """Everything the client observed about one request (seconds from the run start)."""

    request_id: str
    client_id: str
    scheduled_s: float
    num_prompt_tokens: int
    num_output_tokens_asked: int
    prompt_kind: str
    sent_s: float | None = None
    status: int | None = None
    chunk_s: list[float] = field(default_factory=list)  # chunks that carried tokens
    chunk_num_tokens: list[int] = field(default_factory=list)
    finish_s: float | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    is_done: bool = False  # data: [DONE] seen
    retry_after: str | None = None
    error: str | None = None
    end_s: float | None = None
    outcome: str = "aborted"

    @property
    def num_output_tokens(self) -> int:
        return sum(self.chunk_num_tokens)

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


Clock = Callable[[], float]


async def send(client: httpx.AsyncClient, plan: RequestPlan, endpoint: str,
               timeout_s: float, clock: Clock) -> RequestRecord:
    """Send ``plan``'s body now and follow its stream to the end."""
    record = RequestRecord(plan.request_id, plan.client_id, plan.scheduled_s,
                           plan.num_prompt_tokens, plan.num_output_tokens, plan.prompt_kind)
    record.sent_s = clock()
    headers = {"X-Client-Id": plan.client_id}
    try:
        async with asyncio.timeout(timeout_s):
            await _exchange(client, ENDPOINTS[endpoint], plan.body, headers, record, clock)
    except TimeoutError:
        record.outcome, record.error = "timeout", f"no end within {timeout_s} s"
    except httpx.TimeoutException as exc:
        record.outcome, record.error = "timeout", _text(exc)
    except httpx.HTTPError as exc:  # connect / read / protocol / decoding failures
        record.outcome, record.error = "connection_error", f"{type(exc).__name__}: {_text(exc)}"
    except UnicodeDecodeError as exc:
        record.outcome, record.error = "aborted", f"the stream is not UTF-8 text: {_text(exc)}"
    record.end_s = clock()
    return record


async def _exchange(client: httpx.AsyncClient, path: str, body: dict[str, Any],
                    headers: dict[str, str], record: RequestRecord, clock: Clock) -> None:
    async with client.stream("POST", path, json=body, headers=headers) as response:
        record.status = response.status_code
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")
            record.outcome = "rejected" if response.status_code == 429 else "http_error"
            record.retry_after = response.headers.get("retry-after")
            record.error = f"HTTP {response.status_code}: {_error_message(text)}"
            return
        async for line in response.aiter_lines():
            if _take_line(line, record, clock()):
                break
    record.outcome = _stream_outcome(record)


def _take_line(line: str, record: RequestRecord, now_s: float) -> bool:
    """Fold one SSE line into ``record``; True once the stream is done."""
    if not line.startswith("data:"):
        return False
    data = line[len("data:"):].strip()
    if not data:  # an empty keep-alive event
        return False
    if data == "[DONE]":
        record.is_done = True
        return True
    try:
        chunk = json.loads(data)
    except json.JSONDecodeError:
        record.error = f"a stream chunk is not JSON: {data[:_MAX_ERROR_CHARS]!r}"
        return True
    if not isinstance(chunk, dict):
        record.error = f"a stream chunk is not an object: {data[:_MAX_ERROR_CHARS]!r}"
        return True
    if "error" in chunk:
        record.error = f"error in stream: {_error_message(json.dumps(chunk))}"
        return True
    if isinstance(chunk.get("usage"), dict):
        record.usage = chunk["usage"]
    for choice in chunk.get("choices") or ():
        if isinstance(choice, dict):
            _take_choice(choice, record, now_s)
    return False


def _take_choice(choice: dict[str, Any], record: RequestRecord, now_s: float) -> None:
    num_tokens = tokens_in_choice(choice)
    if num_tokens:
        record.chunk_s.append(now_s)
        record.chunk_num_tokens.append(num_tokens)
    reason = choice.get("finish_reason")
    if reason is not None and record.finish_reason is None:
        record.finish_reason = str(reason)
        record.finish_s = now_s


def tokens_in_choice(choice: dict[str, Any]) -> int:
    """Tokens one streamed choice carries (see the module docstring)."""
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict):
        listed = logprobs.get("tokens", logprobs.get("content"))
        if isinstance(listed, list):
            return len(listed)
    delta = choice.get("delta")
    text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    return 1 if isinstance(text, str) and text else 0


def _stream_outcome(record: RequestRecord) -> str:
    if record.error is None and record.finish_reason in _FINISHED_REASONS \
            and record.num_output_tokens > 0:
        return "finished"
    if record.error is None:
        record.error = (f"stream ended with finish_reason {record.finish_reason!r} after "
                        f"{record.num_output_tokens} tokens")
    return "aborted"


def _error_message(text: str) -> str:
    try:
        body = json.loads(text)
        message = body["error"]["message"] if isinstance(body.get("error"), dict) \
            else body.get("error", body.get("detail", text))
    except (json.JSONDecodeError, AttributeError, KeyError, TypeError):
        message = text
    return " ".join(str(message).split())[:_MAX_ERROR_CHARS]


def _text(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:_MAX_ERROR_CHARS] or type(exc).__name__
