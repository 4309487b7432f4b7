"""Preemption mid-generation changes nothing in the outputs (issue 5, 0x0C).

RECOMPUTE frees a victim's blocks and rebuilds its rows later; PRESERVE_EXACT
copies them to the host pool and back. Both run here on a device pool of 12
blocks x 4 rows (48 rows) for five requests that need 87 rows in all, so the
policies must preempt requests that have already emitted tokens.
"""

from __future__ import annotations

import pytest
import torch
from engine_model_helpers import (
    GREEDY,
    LOGPROB_ATOL,
    assert_same_outputs,
    make_prompts,
    run_alone,
    run_engine,
)

from iterserve.kv.results import SwapDirection
from iterserve.llm import LLM
from iterserve.model.executor import TorchExecutor
from iterserve.records.plan import IntentKind
from iterserve.records.sampling_params import SamplingParams
from iterserve.records.spec import Capacity, KvSpec

LENGTHS = (3, 9, 17, 5, 26)
NUM_BLOCKS, BLOCK_SIZE, NUM_HOST_BLOCKS = 12, 4, 64
SAMPLED = SamplingParams(max_tokens=12, temperature=0.8, top_p=0.9, ignore_eos=True)


class PoisoningExecutor(TorchExecutor):
    """After every swap-out, overwrite the released device blocks with noise,
    so a resumed request can only be right if its rows really came back from
    the host. The noise is finite: attention relies on pool rows being finite
    (a masked NaN would still leak through 0 * V)."""

    def _copy_blocks(self, direction: SwapDirection, pairs: tuple[tuple[int, int], ...]) -> None:
        super()._copy_blocks(direction, pairs)
        if direction is SwapDirection.OUT:
            device_ids = torch.tensor([device for device, _ in pairs])
            noise = torch.Generator().manual_seed(len(pairs))
            for pool in (*self.cache.key_pools, *self.cache.value_pools):
                shape = (len(pairs), *pool.shape[1:])
                pool[device_ids] = 3.0 * torch.randn(shape, generator=noise, dtype=pool.dtype)


@pytest.fixture(scope="module")
def prompts(tiny_model) -> list[list[int]]:
    return make_prompts(LENGTHS, tiny_model.config.vocab_size, seed=7)


def _unconstrained(model, tokenizer, prompts, params=GREEDY):
    return run_engine(TorchExecutor(model, 256, BLOCK_SIZE, tokenizer), prompts, "vllm",
                      params=params)


def _assert_mid_generation_preemptions(run, kind: IntentKind) -> None:
    victims = [(rid, emitted) for rid, k, emitted in run.preemptions.preempted if k is kind]
    assert victims, f"no {kind.value} preemption happened"
    assert any(emitted > 0 for _, emitted in victims), "no victim had emitted a token yet"


@pytest.mark.slow
def test_recompute_preemption_through_llm_keeps_greedy_outputs(tiny_dir, prompts) -> None:
    llm = LLM(tiny_dir, policy="vllm", num_kv_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE)
    outputs = llm.generate(prompts, GREEDY)
    assert llm.executor.kv.stats().intents.get("preempt_recompute", 0) > 0
    assert_same_outputs(outputs, run_alone(tiny_dir, prompts))


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["vllm", "sarathi-serve"])
@pytest.mark.parametrize("prefix_caching", [False, True], ids=["cold", "prefix-cache"])
def test_recompute_preemption_mid_generation(tiny_model, tiny_tokenizer, prompts, policy,
                                             prefix_caching) -> None:
    executor = TorchExecutor(tiny_model, NUM_BLOCKS, BLOCK_SIZE, tiny_tokenizer,
                             enable_prefix_caching=prefix_caching)
    kv = KvSpec(num_kv_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, preemption_mode="recompute")
    capacity = Capacity(max_num_batched_tokens=512, max_num_seqs=64)
    run = run_engine(executor, prompts, policy, kv=kv, capacity=capacity,
                     settings={"max_num_seqs": 64, "tau": 8})
    want = _unconstrained(tiny_model, tiny_tokenizer, prompts)
    _assert_mid_generation_preemptions(run, IntentKind.PREEMPT_RECOMPUTE)
    assert executor.kv.stats().intents["preempt_recompute"] > 0
    # every readmitted victim resumed through a ticket rebuilding [0, T_target) (0x0C)
    tickets = executor.kv.suspensions.tickets
    assert tickets and all(t.rebuild_interval == (0, t.semantic_target_tokens) for t in tickets)
    assert run.outputs == want.outputs
    assert run.finish_reasons == ["length"] * len(prompts)
    _assert_close_logprobs(run.logprobs, want.logprobs)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["vllm", "sarathi-serve"])
def test_preserve_exact_preemption_swaps_and_keeps_greedy_outputs(tiny_model, tiny_tokenizer,
                                                                  prompts, policy) -> None:
    executor = PoisoningExecutor(tiny_model, NUM_BLOCKS, BLOCK_SIZE, tiny_tokenizer,
                                 num_host_blocks=NUM_HOST_BLOCKS, enable_prefix_caching=False)
    kv = KvSpec(num_kv_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, num_host_blocks=NUM_HOST_BLOCKS,
                preemption_mode="swap")
    capacity = Capacity(max_num_batched_tokens=512, max_num_seqs=64)
    run = run_engine(executor, prompts, policy, kv=kv, capacity=capacity,
                     settings={"max_num_seqs": 64, "tau": 8})
    want = _unconstrained(tiny_model, tiny_tokenizer, prompts)
    _assert_mid_generation_preemptions(run, IntentKind.PREEMPT_PRESERVE_EXACT)
    stats = executor.kv.stats()
    assert stats.num_swapped_out_blocks > 0
    assert stats.num_swapped_in_blocks == stats.num_swapped_out_blocks  # no cache reuse here
    # preservation never failed over to recompute
    assert "preempt_recompute" not in stats.intents
    assert "preserve_fallback_recompute" not in stats.intents
    # every resume went through a ticket: exact preservation rebuilds nothing (0x0C)
    tickets = executor.kv.suspensions.tickets
    assert tickets and all(t.rebuild_interval[0] == t.rebuild_interval[1] for t in tickets)
    assert executor.kv.suspensions.num_blocked == 0
    assert run.outputs == want.outputs
    assert run.finish_reasons == ["length"] * len(prompts)
    _assert_close_logprobs(run.logprobs, want.logprobs)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_seeded_sampling_survives_preemption(tiny_model, tiny_tokenizer, prompts, mode) -> None:
    """A draw depends on (seed, output index) only, so a rebuilt or restored
    request continues its sampled stream exactly."""
    executor = TorchExecutor(tiny_model, NUM_BLOCKS, BLOCK_SIZE, tiny_tokenizer,
                             num_host_blocks=NUM_HOST_BLOCKS)
    kv = KvSpec(num_kv_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, num_host_blocks=NUM_HOST_BLOCKS,
                preemption_mode=mode)
    run = run_engine(executor, prompts, "vllm", kv=kv, params=SAMPLED)
    assert run.preemptions.preempted
    assert run.outputs == _unconstrained(tiny_model, tiny_tokenizer, prompts, SAMPLED).outputs


def _assert_close_logprobs(got, want) -> None:
    for g, w in zip(got, want, strict=True):
        assert max(abs(a - b) for a, b in zip(g, w, strict=True)) < LOGPROB_ATOL


@pytest.mark.slow
def test_prompt_logprobs_are_scored_once_through_recompute_preemption(
        tiny_model, tiny_tokenizer, prompts) -> None:
    """A rebuilt request recomputes its prompt rows; their logprobs are not
    recorded twice, and equal an unconstrained run's."""
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True,
                            prompt_logprobs=True, num_top_logprobs=2)
    executor = TorchExecutor(tiny_model, NUM_BLOCKS, BLOCK_SIZE, tiny_tokenizer)
    kv = KvSpec(num_kv_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, preemption_mode="recompute")
    run = run_engine(executor, prompts, "vllm", kv=kv, params=params)
    want = _unconstrained(tiny_model, tiny_tokenizer, prompts, params)
    _assert_mid_generation_preemptions(run, IntentKind.PREEMPT_RECOMPUTE)
    assert run.outputs == want.outputs
    for got, expected, prompt in zip(run.prompt_logprobs, want.prompt_logprobs, prompts,
                                     strict=True):
        assert len(got) == len(expected) == len(prompt) - 1
        assert [ids for _, alts in got for ids, _ in alts] == \
            [ids for _, alts in expected for ids, _ in alts]
        assert max(abs(g - e) for (g, _), (e, _) in zip(got, expected, strict=True)) \
            < LOGPROB_ATOL
