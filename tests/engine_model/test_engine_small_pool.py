"""Issue 14 part 1 on the real executor: the offline API with ``vllm`` on a
5-block pool (20 rows) finishes as ``sarathi-serve`` does, preempting, for
requests that each fit the pool but not together, and a policy without a
preemption path is refused before the batch runs."""

from __future__ import annotations

import pytest

from iterserve.llm import LLM
from iterserve.plan.feasibility import InfeasibleRun
from iterserve.records.sampling_params import SamplingParams

PARAMS = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
PROMPTS = [list(range(5, 15)), list(range(20, 22)), list(range(40, 50))]  # 10 + 8 rows fit


@pytest.mark.parametrize("policy", ["vllm", "vllm-priority", "sarathi-serve"])
def test_a_five_block_pool_finishes(tiny_dir, policy: str) -> None:
    outs = LLM(tiny_dir, policy=policy, num_kv_blocks=5, block_size=4).generate(PROMPTS, PARAMS)
    assert [o.finish_reason for o in outs] == ["length"] * 3
    assert [len(o.token_ids) for o in outs] == [8, 8, 8]


def test_a_policy_without_preemption_is_refused_before_the_run(tiny_dir) -> None:
    llm = LLM(tiny_dir, policy="refill", num_kv_blocks=5, block_size=4)
    with pytest.raises(InfeasibleRun, match="policy 'refill' has no preemption path"):
        llm.generate(PROMPTS, PARAMS)
