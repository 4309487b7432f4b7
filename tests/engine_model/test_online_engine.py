"""The online engine front (issue 10 step 1) on the tiny model: requests
submitted while the loop runs, continuous batching visible in the event log,
abort freeing blocks, an idle loop that sleeps, and a replayable log."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from iterserve.engine.streams import BlockingOutputStream
from iterserve.metrics.events import ArrivalEvent, CancelEvent, FirstTokenEvent
from iterserve.records.sampling_params import SamplingParams
from iterserve.sim.replay import replay
from torch_fixtures import fail_on_call

GREEDY = dict(temperature=0.0, ignore_eos=True)


@pytest.fixture
def online(tiny_dir):
    from iterserve.llm import EngineConfig
    from iterserve.runtime import load_runtime

    runtime = load_runtime(tiny_dir, EngineConfig(num_kv_blocks=128, max_num_batched_tokens=256))
    yield runtime
    runtime.engine.shutdown(0.0)


def _submit(runtime, prompt: str, max_tokens: int) -> tuple[str, BlockingOutputStream]:
    stream = BlockingOutputStream("")
    ids = runtime.tokenizer.encode(prompt)
    rid = runtime.engine.add_request(ids, SamplingParams(max_tokens=max_tokens, **GREEDY), stream)
    return rid, stream


def _wait(predicate, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.mark.slow
def test_a_late_request_gets_its_first_token_within_a_few_iterations(online, tmp_path):
    engine = online.engine
    long_batch = [_submit(online, f"long request {i}", 120) for i in range(6)]
    _wait(lambda: engine.engine.num_iterations >= 10)
    late_id, late = _submit(online, "a late arrival", 4)
    late_events = list(late)
    assert late_events[-1].finish_reason == "length"
    for _, stream in long_batch:
        assert list(stream)[-1].finish_reason == "length"
    events = engine.events.log()
    arrival_s = next(e.time_s for e in events if isinstance(e, ArrivalEvent)
                     and e.request_id == late_id)
    first_s = next(e.time_s for e in events if isinstance(e, FirstTokenEvent)
                   and e.request_id == late_id)
    iterations = [c.time_s for c in engine.events.iterations]
    between = [t for t in iterations if arrival_s <= t < first_s]
    assert len(between) <= 2, between  # decided at the next cut or the one after
    assert sum(1 for t in iterations if t >= first_s) > 10  # the long batch was still decoding
    engine.shutdown(0.0)
    log = tmp_path / "online.jsonl"
    engine.write_logs(log, None)
    assert replay(log).num_iterations == engine.engine.num_iterations


@pytest.mark.slow
def test_abort_frees_the_blocks_and_counts_as_cancelled(online):
    engine = online.engine
    rid, stream = _submit(online, "to be cancelled", 100)
    keep_id, keep = _submit(online, "to be kept", 5)
    events = iter(stream)
    assert next(events).is_accepted
    assert next(events).token_ids  # decoding
    engine.abort(rid)
    rest = list(events)
    assert rest[-1].finish_reason == "cancelled"
    assert list(keep)[-1].finish_reason == "length"
    assert engine.wait_idle(30)
    facts = engine.state.capacity
    assert facts.num_blocks_free == facts.num_blocks_total
    cancels = [e for e in engine.events.log() if isinstance(e, CancelEvent)]
    assert [(e.request_id, e.reason) for e in cancels] == [(rid, "client")]
    outcomes = engine.publisher.outcomes()
    assert outcomes[("cancelled", "anonymous")] == 1
    assert outcomes[("finished", "anonymous")] == 1
    assert rid not in engine.executor.streams and keep_id not in engine.executor.streams


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_idle_engine_sleeps(online):
    engine = online.engine
    _, stream = _submit(online, "one request", 2)
    list(stream)
    assert engine.wait_idle(30)
    tid = engine._thread.native_id
    stat = Path(f"/proc/self/task/{tid}/stat")
    ticks = lambda: sum(int(x) for x in stat.read_text().rsplit(")", 1)[1].split()[11:13])  # noqa: E731
    before, version = ticks(), engine.state.state_version
    time.sleep(0.5)
    assert ticks() - before <= 1  # clock ticks of CPU time: none while waiting
    assert engine.state.state_version == version


def test_refused_requests_never_reach_the_engine(online):
    from iterserve.engine.online import RequestRefused

    with pytest.raises(RequestRefused, match="KV blocks"):
        online.engine.check_request(128 * 16, 1)
    with pytest.raises(RequestRefused, match="empty"):
        online.engine.add_request([], SamplingParams(), BlockingOutputStream(""))
    assert online.engine.num_submitted == 0


def test_an_engine_failure_ends_the_live_streams_and_the_engine_keeps_serving(online):
    engine = online.engine
    fail_on_call(engine.executor, 2, RuntimeError("device lost"))
    _, doomed = _submit(online, "this one fails", 8)
    events = list(doomed)
    assert events[-1].finish_reason == "aborted"
    assert events[-1].reason == "engine error: RuntimeError"
    assert isinstance(engine.take_error(), RuntimeError)
    _, fine = _submit(online, "this one works", 3)
    assert list(fine)[-1].finish_reason == "length"
    assert engine.wait_idle(30)
    facts = engine.state.capacity
    assert facts.num_blocks_free == facts.num_blocks_total
    assert engine.publisher.outcomes()[("aborted", "anonymous")] == 1


def test_a_failure_of_one_request_aborts_it_alone_and_the_log_replays(online, tmp_path):
    """A packed forward that fails because of one request's rows is run again
    one request at a time: that request is aborted, the others in its batch
    finish, and the decision log (with the failure fact) replays."""
    from iterserve.engine.online import Submission

    engine = online.engine
    poison = 77
    real = engine.executor.model.forward

    def forward(batch, cache):  # type: ignore[no-untyped-def]
        if poison in batch.token_ids.tolist():
            raise RuntimeError("poisoned row")
        return real(batch, cache)

    engine.executor.model.forward = forward
    prompts = ([5, 6, 7], [poison, 8, 9], [10, 11, 12, 13])
    streams = [BlockingOutputStream("") for _ in prompts]
    ids, _ = engine.add_requests([
        Submission(p, SamplingParams(max_tokens=6, **GREEDY), s)
        for p, s in zip(prompts, streams, strict=True)])  # one arrival: one batch
    finals = [list(stream)[-1] for stream in streams]
    assert [f.finish_reason for f in finals] == ["length", "aborted", "length"]
    assert finals[1].reason == "engine error: RuntimeError"
    assert str(engine.take_error()) == "poisoned row"  # for LLM.generate to raise
    assert engine.wait_idle(30)
    facts = engine.state.capacity
    assert facts.num_blocks_free == facts.num_blocks_total
    engine.shutdown(0.0)
    log = tmp_path / "online.jsonl"
    engine.write_logs(log, None)
    assert '"executor_error"' in log.read_text()
    assert replay(log).num_iterations == engine.engine.num_iterations
