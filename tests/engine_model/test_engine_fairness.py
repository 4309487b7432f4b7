"""Client flood on the real engine (tiny model), 0x09A: under ``vtc`` the quiet
client's TTFT stays within 2x of its unloaded value; under request FIFO it
grows with the flood. TTFT is counted in engine iterations (deterministic,
unlike wall time on a shared machine); the fairness measures come from the
same event log the simulator's reports use."""

from __future__ import annotations

import statistics

import pytest
from engine_model_helpers import make_prompts

from iterserve.engine.events import EventRecorder
from iterserve.engine.loop import Engine
from iterserve.engine.trace import RunTrace
from iterserve.metrics.event_scan import build_timelines
from iterserve.metrics.fairness import evaluate_fairness
from iterserve.metrics.slo import ObservationWindow
from iterserve.model.executor import TorchExecutor
from iterserve.policies.registry import make_policy
from iterserve.records.sampling_params import SamplingParams
from iterserve.records.spec import Capacity, OnlineWorkload, RequestSpec

PARAMS = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
NUM_FLOOD, NUM_QUIET, PROMPT_LEN = 16, 2, 6  # the quiet client stays under its share


def _run(model, tokenizer, policy: str, *, flood: bool):
    executor = TorchExecutor(model, 256, 4, tokenizer)
    vocab = model.config.vocab_size
    clients = (["flood"] * NUM_FLOOD if flood else []) + ["quiet"] * NUM_QUIET
    prompts = make_prompts([PROMPT_LEN] * len(clients), vocab, seed=3)
    specs = []
    for index, (client, prompt) in enumerate(zip(clients, prompts, strict=True)):
        rid = f"{client}{index}"
        executor.add_request(rid, prompt, PARAMS, seed=index)
        specs.append(RequestSpec(rid, 0.0, len(prompt), PARAMS.max_tokens, client_id=client,
                                 prompt_token_ids=tuple(prompt)))
    capacity = Capacity(max_num_batched_tokens=64, max_num_seqs=4)
    workload = OnlineWorkload("flood-real", "ms", capacity, tuple(specs))
    trace, recorder = RunTrace(), EventRecorder(1e-3)
    Engine(workload, make_policy(policy), executor, [trace, recorder]).run()
    return trace, recorder


def _quiet_ttft_p50_iterations(trace: RunTrace) -> float:
    starts = [record.start for record in trace.iterations]
    ttfts = [sum(1 for start in starts if start < record.first_token_time)
             for record in trace.requests.values()
             if record.client_id == "quiet" and record.first_token_time is not None]
    assert len(ttfts) == NUM_QUIET
    return statistics.median(ttfts)


@pytest.mark.slow
def test_vtc_keeps_the_quiet_clients_ttft_under_a_flood(tiny_model, tiny_tokenizer) -> None:
    alone, _ = _run(tiny_model, tiny_tokenizer, "refill", flood=False)
    unloaded = _quiet_ttft_p50_iterations(alone)
    fifo, _ = _run(tiny_model, tiny_tokenizer, "refill", flood=True)
    vtc, recorder = _run(tiny_model, tiny_tokenizer, "vtc", flood=True)
    assert _quiet_ttft_p50_iterations(vtc) <= 2 * unloaded
    assert _quiet_ttft_p50_iterations(fifo) > 4 * unloaded  # grows with the flood
    log = recorder.log()
    window = ObservationWindow(0.0, max(event.time_s for event in log) + 1.0)
    fairness = evaluate_fairness(build_timelines(log).values(), window)
    assert {c.client_id for c in fairness.per_client} == {"flood", "quiet"}
    assert fairness.max_backlogged_gap is not None
