"""``n > 1`` samples share the prompt's full KV blocks (engine/held.py):
counted from the prompt rows the executor actually computes, checked
against the server's own single-request outputs, with prefix caching on and
off, streamed and not, with batched prompts, and with an abort while the
leader is still prefilling."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from server_helpers import assert_log_replays

pytestmark = pytest.mark.slow

BLOCK_SIZE = 16
NUM_FULL_BLOCKS = 4
NUM_PARTIAL_ROWS = 5
PROMPT_IDS = [(7 * i + 3) % 250 + 1 for i in range(NUM_FULL_BLOCKS * BLOCK_SIZE + NUM_PARTIAL_ROWS)]
OTHER_IDS = [(11 * i + 5) % 250 + 1 for i in range(3 * BLOCK_SIZE + 2)]
N = 4


def post(server, path: str, body: dict) -> dict:
    response = httpx.post(server.base_url + path, json={"model": "tiny", **body}, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


class PromptRows:
    """Counts the prompt rows the executor computes (planned prefill rows
    less the rows it skipped as cached), by wrapping its ``execute``."""

    def __init__(self, executor) -> None:
        from iterserve.records.view import WorkKind

        self.count = 0
        real = executor.execute

        def execute(plan, state):
            skipped = executor.num_cached_rows_skipped
            result = real(plan, state)
            planned = sum(item.end - item.start for item in plan.work
                          if item.kind is WorkKind.PREFILL_CHUNK)
            self.count += planned - (executor.num_cached_rows_skipped - skipped)
            return result

        executor.execute = execute


@pytest.fixture(scope="module")
def shared(serve):
    # the default token budget fits every sample's prompt in one step: without
    # the hold all n would be planned together and none would find a cached block
    server = serve(block_size=BLOCK_SIZE)
    return server, PromptRows(server.runtime.executor)


@pytest.fixture(scope="module")
def chunked(serve):
    """A small token budget: a prompt takes several prefill steps."""
    return serve(block_size=BLOCK_SIZE, max_num_batched_tokens=2 * BLOCK_SIZE)


@pytest.fixture(scope="module")
def unshared(serve):
    server = serve(block_size=BLOCK_SIZE, enable_prefix_caching=False)
    return server, PromptRows(server.runtime.executor)


def greedy(ids, **extra) -> dict:
    return {"prompt": ids, "max_tokens": 6, "temperature": 0, "ignore_eos": True, **extra}


def test_n_samples_compute_the_prompt_once_plus_partial_blocks(shared):
    server, rows = shared
    before = rows.count
    reply = post(server, "/v1/completions", greedy(PROMPT_IDS, n=N))
    computed = rows.count - before
    # sample 0 computes the whole prompt, each other sample its partial last block only
    assert computed == len(PROMPT_IDS) + (N - 1) * NUM_PARTIAL_ROWS, computed
    assert [c["index"] for c in reply["choices"]] == list(range(N))
    single = post(server, "/v1/completions", greedy(PROMPT_IDS))["choices"][0]["text"]
    assert [c["text"] for c in reply["choices"]] == [single] * N


def test_n_samples_equal_single_requests_and_keep_seeds(shared):
    server, _ = shared
    body = {"prompt": OTHER_IDS, "max_tokens": 6, "ignore_eos": True, "temperature": 1.0,
            "seed": 11}
    singles = [post(server, "/v1/completions", {**body, "seed": 11 + i})["choices"][0]["text"]
               for i in range(3)]
    reply = post(server, "/v1/completions", {**body, "n": 3})
    assert [c["text"] for c in reply["choices"]] == singles  # sample i draws with seed + i
    assert len(set(singles)) > 1


def test_streamed_n_with_batched_prompts_keeps_choice_order(shared):
    server, _ = shared
    prompts = [[5, *PROMPT_IDS[1:]], [5, *OTHER_IDS[1:]]]  # not cached by the other tests
    response = httpx.post(server.base_url + "/v1/completions", json={
        "model": "tiny", **greedy(prompts, n=2, stream=True)}, timeout=120)
    assert response.status_code == 200, response.text
    chunks = [json.loads(line[6:]) for line in response.text.splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    text = dict.fromkeys(range(4), "")
    for chunk in chunks:
        for choice in chunk["choices"]:
            text[choice["index"]] += choice["text"]
    expected = [post(server, "/v1/completions", greedy(p))["choices"][0]["text"]
                for p in prompts]
    assert [text[i] for i in range(4)] == [expected[0], expected[0], expected[1], expected[1]]


def test_prefix_caching_off_runs_n_full_prompts(unshared):
    server, rows = unshared
    single = post(server, "/v1/completions", greedy(PROMPT_IDS))["choices"][0]["text"]
    before = rows.count
    reply = post(server, "/v1/completions", greedy(PROMPT_IDS, n=N))
    assert rows.count - before == N * len(PROMPT_IDS)
    assert [c["text"] for c in reply["choices"]] == [single] * N


def test_abort_while_the_leader_prefills_frees_every_block(chunked):
    from iterserve.engine.online import Submission
    from iterserve.engine.streams import BlockingOutputStream
    from iterserve.records.sampling_params import SamplingParams

    server = chunked
    engine, executor = server.engine, server.runtime.executor
    assert engine.wait_idle(30)
    free_before = executor.capacity().num_blocks_free
    ids = [(13 * i + 1) % 250 + 1 for i in range(len(PROMPT_IDS))]
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    streams = [BlockingOutputStream("") for _ in range(N)]
    request_ids: list[str] = []
    held_at_abort: list[bool] = []  # followers not yet declared, leader not yet emitted
    real = executor.execute
    aborted = threading.Event()

    def execute(plan, state):  # abort everything after the leader's first prefill step
        result = real(plan, state)
        if not aborted.is_set() and any(w.request_id == request_ids[0] for w in plan.work):
            aborted.set()
            held_at_abort.append(all(rid not in state.views for rid in request_ids[1:])
                                 and state.views[request_ids[0]].num_emitted == 0)
            for rid in request_ids:
                engine.abort(rid)
        return result

    executor.execute = execute
    try:
        request_ids.extend(engine.add_requests(
            [Submission(ids, params, streams[0])]
            + [Submission(ids, params, s, waits_for=0) for s in streams[1:]])[0])
        finals = [[e for e in s if e.is_final][0].finish_reason for s in streams]
    finally:
        executor.execute = real
    assert held_at_abort == [True]
    assert finals == ["cancelled"] * N
    assert engine.wait_idle(30)
    assert executor.capacity().num_blocks_free == free_before
    assert executor.kv.manager.usage().num_blocks_used == 0


def test_a_rejected_sample_fails_the_whole_request_and_frees_every_block(serve):
    server = serve(block_size=BLOCK_SIZE, overload="bounded", max_live=2)
    response = httpx.post(server.base_url + "/v1/completions",
                          json={"model": "tiny", **greedy(PROMPT_IDS, n=N)}, timeout=120)
    assert response.status_code == 429, response.text  # all or nothing, as without the hold
    assert server.engine.wait_idle(30)
    assert server.runtime.executor.kv.manager.usage().num_blocks_used == 0
    assert post(server, "/v1/completions", greedy(PROMPT_IDS, n=2))["choices"]


def test_held_samples_arrive_late_and_count_latency_from_the_request(shared):
    from iterserve.engine.observer import EngineObserver
    from iterserve.server.metrics import parse_metrics

    server, _ = shared
    engine = server.engine
    seen: list[tuple[str, float, float]] = []
    first_ms: dict[str, float] = {}

    class Arrivals(EngineObserver):
        def on_arrival(self, spec, now):
            seen.append((spec.request_id, spec.arrival, engine.submitted_ms(spec)))

        def on_step(self, state, plan, result, successor):
            for done in result.completed:
                if done.emitted:
                    first_ms.setdefault(done.request_id, successor.now)

    def ttft_sum_s() -> float:
        samples = parse_metrics(httpx.get(server.base_url + "/metrics").text, ("model_name",))
        return samples["vllm:time_to_first_token_seconds_sum"]

    assert engine.wait_idle(30)
    before = ttft_sum_s()
    observer = Arrivals()
    engine.engine.observers.insert(0, observer)
    try:
        post(server, "/v1/completions", greedy([9, *PROMPT_IDS[1:]], n=3))
    finally:
        engine.engine.observers.remove(observer)
    (_, leader_arrival, leader_submitted), *followers = seen
    assert len(followers) == 2 and leader_submitted == leader_arrival
    for _, arrival, submitted in followers:  # declared to the scheduler after the leader's
        assert submitted == leader_arrival < arrival  # prompt; latency counts from the request
    expected_s = sum(first_ms[rid] - leader_arrival for rid, _, _ in seen) / 1000.0
    assert ttft_sum_s() - before == pytest.approx(expected_s, abs=1e-6)


def test_shared_runs_reconcile_and_replay_bit_for_bit(serve, tmp_path):
    from iterserve.server.metrics import parse_metrics

    server = serve(block_size=BLOCK_SIZE, max_num_batched_tokens=2 * BLOCK_SIZE)
    post(server, "/v1/completions", greedy(PROMPT_IDS, n=N))
    post(server, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "tell me a long story " * 4}], "n": 3,
        "max_tokens": 4, "seed": 2})
    with httpx.stream("POST", server.base_url + "/v1/completions", timeout=120, json={
            "model": "tiny", **greedy(OTHER_IDS, n=3, stream=True, max_tokens=40)}) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                break  # leaving the block disconnects mid-stream: every sample is aborted
    assert server.engine.wait_idle(60)
    samples = parse_metrics(httpx.get(server.base_url + "/metrics").text, ("model_name",))
    ended = sum(samples.get(f'iterserve:requests_total{{outcome="{o}"}}', 0.0)
                for o in ("finished", "cancelled", "rejected", "aborted"))
    assert ended == samples["iterserve:requests_submitted_total"] == N + 3 + 3
    assert samples['iterserve:requests_total{outcome="finished"}'] == N + 3
    assert server.runtime.executor.kv.manager.usage().num_blocks_used == 0
    server.stop()
    log = tmp_path / "decisions.jsonl"
    assert_log_replays(server.engine, log)
