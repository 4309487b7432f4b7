"""Greedy output of a batch equals each prompt run alone (issue 5), under
every policy family: frontier catch-up, stall-free chunking, fixed-size
chunks, ORCA and static cohorts."""

from __future__ import annotations

import pytest
from engine_model_helpers import GREEDY, assert_same_outputs, make_prompts, run_alone

from iterserve.llm import LLM

LENGTHS = (3, 9, 17, 5, 26)  # mixed, not block-aligned (block size 4)

POLICIES = [
    pytest.param("vllm", {}, id="vllm"),
    pytest.param("sarathi-serve", {"tau": 8}, id="sarathi-serve-tau8"),
    pytest.param("sarathi", {"chunk_size": 3}, id="sarathi-chunk3"),
    pytest.param("orca", {}, id="orca"),
    pytest.param("static", {}, id="static"),
]


@pytest.fixture(scope="module")
def prompts(tiny_model) -> list[list[int]]:
    return make_prompts(LENGTHS, tiny_model.config.vocab_size, seed=5)


@pytest.fixture(scope="module")
def alone(tiny_dir, prompts):
    return run_alone(tiny_dir, prompts)


@pytest.mark.slow
@pytest.mark.parametrize(("policy", "knobs"), POLICIES)
def test_batch_equals_each_prompt_alone(tiny_dir, prompts, alone, policy, knobs) -> None:
    llm = LLM(tiny_dir, policy=policy, block_size=4, **knobs)
    outputs = llm.generate(prompts, GREEDY)
    assert_same_outputs(outputs, alone)
    assert all(len(o.token_ids) == GREEDY.max_tokens for o in outputs)
    assert {o.finish_reason for o in outputs} == {"length"}
    assert [o.prompt_token_ids for o in outputs] == [tuple(p) for p in prompts]
    for out in outputs:
        assert out.first_token_ms is not None and out.finish_ms is not None
        assert 0.0 <= out.first_token_ms <= out.finish_ms


@pytest.mark.slow
def test_batch_result_order_follows_prompt_order_not_finish_order(tiny_dir, prompts, alone) -> None:
    """Longest first, with staggered max_tokens so requests finish out of order."""
    from iterserve.records.sampling_params import SamplingParams

    order = [4, 2, 1, 3, 0]
    params = [SamplingParams(max_tokens=12 - 2 * i, temperature=0.0, ignore_eos=True)
              for i in range(len(order))]
    outputs = LLM(tiny_dir, block_size=4).generate([prompts[i] for i in order], params)
    for out, i, p in zip(outputs, order, params, strict=True):
        assert out.token_ids == alone[i].token_ids[: p.max_tokens]
