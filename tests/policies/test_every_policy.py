"""Every registered policy on the same random workloads: every plan
validates (the engine validates each step) and nothing is lost."""

from __future__ import annotations

import pytest

from iterserve.engine.loop import Engine
from iterserve.engine.trace import RunTrace
from iterserve.policies.registry import policy_for, policy_names
from iterserve.records import Capacity
from iterserve.sim.factory import make_simulated_executor
from iterserve.sim.generators import RandomWorkloadConfig, random_workload

KNOBS = dict(chunk_size=16, tau=48, max_num_seqs=8, long_prefill_token_threshold=24)


@pytest.mark.parametrize("policy_name", policy_names())
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_policy_finishes_every_request(policy_name: str, seed: int) -> None:
    capacity = Capacity(max_num_batched_tokens=64, max_num_seqs=8)
    manifest = random_workload(RandomWorkloadConfig(num_requests=24), capacity, seed)
    engine = Engine(manifest.online, policy_for(policy_name, manifest.online, KNOBS, strict=False),
                    make_simulated_executor(manifest))
    summary = engine.run(max_iterations=20_000)
    assert engine.is_done, f"{policy_name} left requests unfinished"
    assert summary.final_state.waiting == () and summary.final_state.running == ()


@pytest.mark.parametrize("policy_name", ["vllm", "vllm-priority", "sarathi-serve"])
@pytest.mark.parametrize("seed", [4, 5])
def test_preempting_policy_finishes_under_small_kv(policy_name: str, seed: int) -> None:
    """KV pool far below demand: the preempting policies still finish all."""
    capacity = Capacity(max_num_batched_tokens=64, max_num_seqs=8, kv_rows=160)
    config = RandomWorkloadConfig(num_requests=24, max_prompt_tokens=48, max_output_tokens=48,
                                  mean_interarrival=0.2)
    manifest = random_workload(config, capacity, seed)
    executor = make_simulated_executor(manifest)
    trace = RunTrace()
    policy = policy_for(policy_name, manifest.online, KNOBS, strict=False)
    engine = Engine(manifest.online, policy, executor, [trace])
    engine.run(max_iterations=50_000)
    assert engine.is_done
    reasons = {rid: r.finish_reason for rid, r in trace.requests.items()}
    assert len(reasons) == 24 and all(reason in ("stop", "length") for reason in reasons.values())
    assert executor.kv is not None
    assert executor.kv.facts().num_blocks_free == 160, "blocks leaked"
    assert executor.kv.stats().intents.get("preempt_recompute", 0) > 0, "pool never ran short"
    assert sum(r.num_rebuild_rows for r in trace.iterations) > 0
