"""LoopMailbox: the engine thread's events reach every stream in order, with
one loop wake-up per burst instead of one per event."""

from __future__ import annotations

import asyncio
import threading

import pytest

from iterserve.engine.streams import AsyncOutputStream, LoopMailbox, StreamEvent


async def _collect(stream: AsyncOutputStream) -> list[StreamEvent]:
    return [event async for event in stream]


def test_bursts_arrive_in_order_with_one_wake_up_each() -> None:
    async def scenario() -> tuple[list[list[StreamEvent]], int]:
        loop = asyncio.get_running_loop()
        mailbox = LoopMailbox(loop)
        wake_ups = 0
        schedule = loop.call_soon_threadsafe

        def counted(callback, *args):  # type: ignore[no-untyped-def]
            nonlocal wake_ups
            wake_ups += 1
            return schedule(callback, *args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        streams = [AsyncOutputStream(f"r{i}", loop, mailbox) for i in range(5)]
        readers = [asyncio.ensure_future(_collect(s)) for s in streams]

        go, posted = threading.Event(), threading.Event()

        def engine() -> None:  # three steps, each one burst over every stream
            for step in range(3):
                go.wait()
                go.clear()
                for stream in streams:
                    stream.put([StreamEvent(stream.request_id, (step,),
                                            finish_reason="length" if step == 2 else None)])
                posted.set()

        thread = threading.Thread(target=engine)
        thread.start()
        for _ in range(3):
            go.set()
            assert posted.wait(10)  # the loop is blocked while the burst is posted
            posted.clear()
            await asyncio.sleep(0.01)  # ... then drains it
        outputs = await asyncio.gather(*readers)
        thread.join()
        return outputs, wake_ups

    outputs, wake_ups = asyncio.run(scenario())
    for i, events in enumerate(outputs):
        assert [e.token_ids for e in events] == [(0,), (1,), (2,)]
        assert {e.request_id for e in events} == {f"r{i}"}
    assert wake_ups == 3


def test_a_stream_refuses_a_mailbox_of_another_loop() -> None:
    other = asyncio.new_event_loop()
    try:
        with pytest.raises(ValueError, match="another event loop"):
            AsyncOutputStream("r", asyncio.new_event_loop(), LoopMailbox(other))
    finally:
        other.close()
