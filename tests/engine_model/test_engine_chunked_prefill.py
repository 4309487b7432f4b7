"""Chunked prefill through the engine (0x09): splitting a prompt into chunks
of 1, 2, 3 or 5 rows under vllm's long_prefill_token_threshold changes the
iterations, never the tokens."""

from __future__ import annotations

import pytest
from engine_model_helpers import GREEDY, LOGPROB_ATOL, make_prompts, run_engine

from iterserve.llm import LLM
from iterserve.model.executor import TorchExecutor
from iterserve.records.spec import Capacity

PROMPT_LEN = 13  # not a multiple of any threshold below, nor of the block size


class _CountSteps:
    def __init__(self) -> None:
        self.num_steps = 0

    def __call__(self, num_finished: int, num_total: int) -> None:
        self.num_steps += 1


@pytest.fixture(scope="module")
def prompt(tiny_model) -> list[int]:
    return make_prompts([PROMPT_LEN], tiny_model.config.vocab_size, seed=11)[0]


@pytest.fixture(scope="module")
def unchunked(tiny_dir, prompt):
    llm = LLM(tiny_dir, policy="vllm", block_size=4)
    return llm.generate([prompt], GREEDY)[0]


@pytest.mark.slow
@pytest.mark.parametrize("threshold", [1, 2, 3, 5])
def test_threshold_chunks_give_the_unchunked_greedy_output(tiny_dir, prompt, unchunked,
                                                           threshold) -> None:
    # one request: vLLM would not cut it (nobody to starve); this test is about chunks
    llm = LLM(tiny_dir, policy="vllm", block_size=4, long_prefill_token_threshold=threshold,
              extra_policy_settings=(("long_prefill_token_threshold_caps_lone_request", 1),))
    steps = _CountSteps()
    out = llm.generate([prompt], GREEDY, on_step=steps)[0]
    assert out.token_ids == unchunked.token_ids
    assert len(out.logprobs) == GREEDY.max_tokens
    for got, want in zip(out.logprobs, unchunked.logprobs, strict=True):
        assert abs(got - want) < LOGPROB_ATOL
    # the prompt really was chunked: ceil(P / t) prefill iterations, then one per decode
    num_chunks = -(-PROMPT_LEN // threshold)
    assert steps.num_steps == num_chunks + GREEDY.max_tokens - 1
    # every prompt row computed exactly once, plus one row per later decode
    assert llm.executor.num_computed_rows == PROMPT_LEN + GREEDY.max_tokens - 1


@pytest.mark.slow
def test_chunk_ledger_starts_follow_the_threshold(tiny_model, tiny_tokenizer, prompt) -> None:
    """The 0x09 chunk ledger records starts 0, t, 2t, ... for the prompt."""
    capacity = Capacity(max_num_batched_tokens=512, max_num_seqs=8)
    run = run_engine(TorchExecutor(tiny_model, 64, 4, tiny_tokenizer), [prompt], "vllm",
                     capacity=capacity,
                     settings={"max_num_seqs": 8, "long_prefill_token_threshold": 5,
                               "long_prefill_token_threshold_caps_lone_request": 1})
    assert run.trace.prefill_chunk_starts["r0"] == [0, 5, 10]
    assert run.finish_reasons == ["length"]
