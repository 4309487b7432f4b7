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
import threading
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
    ``top_logprobs`` has one entry per token, the most likely (token id,
    logprob) pairs, when the request asked for them; else it is empty.
    """

    request_id: str
    token_ids: tuple[int, ...] = ()
    text: str = ""
    logprobs: tuple[float, ...] = ()
    token_times_s: tuple[float, ...] = ()
    finish_reason: str | None = None
    reason: str | None = None
    is_accepted: bool = False
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...] = ()
    # with the first token, when asked: (logprob, alternatives) of prompt tokens 1..
    prompt_logprobs: tuple[tuple[float, tuple[tuple[int, float], ...]], ...] = ()

    @property
    def is_final(self) -> bool:
        return self.finish_reason is not None


class StreamSink(Protocol):
    def put(self, events: Sequence[StreamEvent]) -> None:
        """Called on the engine thread; must not block."""


class LoopMailbox:
    """Engine thread -> one asyncio loop, one wake-up per burst.

    ``call_soon_threadsafe`` writes to the loop's self-pipe on every call:
    one syscall on the engine thread and one loop wake-up per request per
    step. Streams that share a mailbox queue their events here instead; the
    first event of a burst schedules one drain on the loop, later events of
    the same step ride along (each stream's events keep their order).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._queued: list[tuple[AsyncOutputStream, tuple[StreamEvent, ...]]] = []

    def post(self, stream: AsyncOutputStream, events: tuple[StreamEvent, ...]) -> None:
        with self._lock:
            self._queued.append((stream, events))
            if len(self._queued) > 1:  # a drain is already scheduled
                return
        # a closed consumer loop means nobody is listening any more
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            queued, self._queued = self._queued, []
        for stream, events in queued:
            stream.put_now(events)


class AsyncOutputStream:
    """An async iterator of one request's events, fed from the engine thread
    (through ``mailbox`` when given, which must serve ``loop``)."""

    def __init__(self, request_id: str, loop: asyncio.AbstractEventLoop,
                 mailbox: LoopMailbox | None = None) -> None:
        if mailbox is not None and mailbox.loop is not loop:
            raise ValueError("the mailbox serves another event loop")
        self.request_id = request_id
        self._loop = loop
        self._mailbox = mailbox
        self._queue: asyncio.Queue[StreamEvent] = asyncio.Queue()

    def put(self, events: Sequence[StreamEvent]) -> None:
        if self._mailbox is not None:
            self._mailbox.post(self, tuple(events))
            return
        # a closed consumer loop means nobody is listening any more
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self.put_now, tuple(events))

    def put_now(self, events: Sequence[StreamEvent]) -> None:
        """On the consumer's loop: queue the events for the iterator."""
        for event in events:
            self._queue.put_nowait(event)

    async def next_event(self) -> StreamEvent:
        return await self._queue.get()

    def take_ready(self) -> list[StreamEvent]:
        """The events already queued, without waiting (none when it is empty)."""
        ready = []
        while not self._queue.empty():
            ready.append(self._queue.get_nowait())
        return ready

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
