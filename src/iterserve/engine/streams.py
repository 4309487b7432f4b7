"""Per-request output streams of the online engine.

The engine thread publishes :class:`StreamEvent` batches; a stream hands
them to its consumer without blocking the engine: :class:`AsyncOutputStream`
posts onto the consumer's asyncio loop (``call_soon_threadsafe``), and
:class:`BlockingOutputStream` onto a thread-safe queue (the offline API).

Every stream sees one ``accepted`` event (the request was published into the
waiting queue) or one final ``rejected`` event, then token events, and ends
with exactly one event whose ``finish_reason`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

# finish reasons a stream can end with (0x07 outcome partition: finished = stop | length)
FINISHED_REASONS = ("stop", "length")
END_REASONS = (*FINISHED_REASONS, "cancelled", "rejected", "aborted")


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """New output of one request since its previous event.

    ``token_times_s`` are engine-clock seconds (since the engine started) at
    which each token was published; ``text`` is the newly visible text
    (never past a stop string). ``reason`` says why a request was rejected
    or aborted (``max_live``, ``shutdown``, an engine error, ...).
    """

    request_id: str
    token_ids: tuple[int, ...] = ()
    text: str = ""
    logprobs: tuple[float, ...] = ()
    token_times_s: tuple[float, ...] = ()
    finish_reason: str | None = None
    reason: str | None = None
    is_accepted: bool = False

    @property
    def is_final(self) -> bool:
        return self.finish_reason is not None


class StreamSink(Protocol):
    def put(self, events: Sequence[StreamEvent]) -> None:
        """Called on the engine thread; must not block."""


class AsyncOutputStream:
    """An async iterator of one request's events, fed from the engine thread."""

    def __init__(self, request_id: str, loop: asyncio.AbstractEventLoop) -> None:
        self.request_id = request_id
        self._loop = loop
        self._queue: asyncio.Queue[StreamEvent] = asyncio.Queue()

    def put(self, events: Sequence[StreamEvent]) -> None:
        # a closed consumer loop means nobody is listening any more
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._put_all, tuple(events))

    def _put_all(self, events: tuple[StreamEvent, ...]) -> None:
        for event in events:
            self._queue.put_nowait(event)

    async def next_event(self) -> StreamEvent:
        return await self._queue.get()

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        while True:
            event = await self._queue.get()
            yield event
            if event.is_final:
                return


class BlockingOutputStream:
    """A blocking iterator of one request's events (for threads, not asyncio)."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self._queue: queue.SimpleQueue[StreamEvent] = queue.SimpleQueue()

    def put(self, events: Sequence[StreamEvent]) -> None:
        for event in events:
            self._queue.put(event)

    def __iter__(self) -> Iterator[StreamEvent]:
        while True:
            event = self._queue.get()
            yield event
            if event.is_final:
                return
