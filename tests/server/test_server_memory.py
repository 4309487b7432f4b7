"""A server that can run for weeks: once a request is reported, nothing in
the engine, its online front, the executor, the metrics or the logs is
keyed by it any more (entries are counted, not bytes), and the logs that
streamed to rotating files while it ran replay bit for bit once joined."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from iterserve.cli.rotating_file import RotatingTextFile
from iterserve.engine.online_log import OnlineLogs
from iterserve.sim.replay import replay

NUM_REQUESTS = 48


async def _one(client: httpx.AsyncClient, index: int) -> int:
    body = {"model": "tiny", "prompt": f"short {index}", "max_tokens": 2 + index % 4,
            "temperature": 0.0, "ignore_eos": True, "stream": index % 3 == 0}
    if index % 7 == 0:  # a client that goes away mid-stream: cancelled
        async with client.stream("POST", "/v1/completions", json={**body, "stream": True,
                                                                   "max_tokens": 60}) as reply:
            async for line in reply.aiter_lines():
                if line.startswith("data: "):
                    break
            return reply.status_code
    reply = await client.post("/v1/completions", json=body)
    return reply.status_code


async def _send_all(base_url: str) -> list[int]:
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        statuses: list[int] = []
        for first in range(0, NUM_REQUESTS, 12):  # 12 at a time: the gate refuses some
            statuses += await asyncio.gather(*(_one(client, i)
                                               for i in range(first, first + 12)))
        return statuses


def per_request_entries(served) -> dict[str, int]:
    """Entries keyed by request id that a reported request could have left."""
    online = served.engine
    engine = online.engine
    state = engine.state
    observer = served.server.config.app.state.metrics.observer
    publisher = online.publisher
    return {
        "pending arrivals": engine.num_pending_arrivals,
        "live requests": state.num_live,
        "views past their last cut": len(set(state.views) - set(state.finished)),
        "engine rejections": len(engine.rejected),
        "inbox and aborts": len(online._inbox) + len(online._aborts)
        + len(online._deferred_aborts),
        "publisher": len(publisher._sinks) + len(publisher._clients)
        + len(publisher._num_chars) + len(publisher.end_reasons),
        "executor streams": len(online.executor.streams),
        "kv keys": len(online.executor.kv._keys),
        "event marks": len(online.events._admitted) + len(online.events._preempted),
        "decision facts queued": online._log.num_queued,
        "metrics live": len(observer._live),
        "metrics ended": len(observer._ended) + len(observer._untaken),
    }


def _wait_for(predicate, timeout_s: float = 30.0) -> None:
    """Until ``predicate()`` holds, or the timeout (the caller's assert then names what is left)."""
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)


def joined(sink: RotatingTextFile, into: Path) -> Path:
    """The segments oldest first, as one file."""
    parts = [sink.segment(i) for i in range(sink.max_backups, -1, -1)]
    into.write_bytes(b"".join(p.read_bytes() for p in parts if p.exists()))
    return into


@pytest.mark.slow
def test_reported_requests_leave_no_entries_and_the_rotated_logs_replay(serve, tmp_path):
    decisions = RotatingTextFile(tmp_path / "decisions.jsonl", 16_000, 1000)
    events = RotatingTextFile(tmp_path / "events.jsonl", 8_000, 1000)
    served = serve(max_num_seqs=8, overload="bounded", max_live=8,
                   logs=OnlineLogs(decisions, events, keep_in_memory=False))  # type: ignore[arg-type]
    statuses = asyncio.run(_send_all(served.base_url))
    assert statuses.count(200) >= NUM_REQUESTS // 2 and set(statuses) <= {200, 429}
    assert 429 in statuses  # the gate's rejections were reported too
    assert served.engine.wait_idle(30)
    # the access log takes the last summaries as their responses end
    _wait_for(lambda: not any(per_request_entries(served).values()))
    entries = per_request_entries(served)
    assert entries == dict.fromkeys(entries, 0)
    assert served.engine.engine.num_iterations > 0

    served.stop()
    served.engine.close_logs()
    decisions.close()
    events.close()
    assert decisions.num_rollovers >= 2 and events.num_rollovers >= 2
    log = joined(decisions, tmp_path / "joined.jsonl")
    assert replay(log).num_iterations == served.engine.engine.num_iterations
    assert log.read_text().count('"type":"arrival"') >= 4
    event_text = joined(events, tmp_path / "events.joined.jsonl").read_text()
    assert event_text.count('"kind": "arrival"') == NUM_REQUESTS


def test_an_engine_without_logs_keeps_none(serve) -> None:
    served = serve(logs=OnlineLogs(keep_in_memory=False))
    assert served.engine.events is None
    with pytest.raises(ValueError, match="keeps no decision log"):
        served.engine.decision_log()
