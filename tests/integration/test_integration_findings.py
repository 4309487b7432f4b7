"""Findings from code this suite did not own, fixed since; kept as regression tests."""

from __future__ import annotations

import pytest

from iterserve.engine.loop import Engine
from iterserve.engine.trace import RunTrace
from iterserve.policies.registry import make_policy, policy_for
from iterserve.records.spec import (
    Capacity,
    HiddenTruth,
    KvSpec,
    OnlineWorkload,
    RequestSpec,
    WorkloadManifest,
)
from iterserve.sim.factory import make_simulated_executor


def test_cancel_publishes_the_freed_memory() -> None:
    requests = (RequestSpec("a", 0.0, 4, 8), RequestSpec("b", 0.0, 4, 8))
    online = OnlineWorkload("cancel-kv", "iteration", Capacity(8, 2, kv_rows=10), requests)
    manifest = WorkloadManifest(online, HiddenTruth({"a": 8, "b": 8}))
    executor = make_simulated_executor(manifest)
    engine = Engine(online, make_policy("vllm"), executor)  # refill: refused here (issue 14)
    engine.step()
    assert engine.state.capacity.num_blocks_free == 2
    engine.cancel("a")
    assert engine.state.capacity == executor.capacity()


def test_failed_preservation_falls_back_to_recompute() -> None:
    requests = (RequestSpec("a", 0.0, 4, 7), RequestSpec("b", 0.0, 4, 7))
    online = OnlineWorkload("preserve-full", "iteration", Capacity(8, 2), requests,
                            kv=KvSpec(10, block_size=1, num_host_blocks=0,
                                      preemption_mode="swap"))
    manifest = WorkloadManifest(online, HiddenTruth({"a": 7, "b": 7}))
    executor = make_simulated_executor(manifest)
    engine = Engine(online, make_policy("vllm"), executor)
    engine.run(max_iterations=100)
    assert engine.is_done and not engine.rejected
    assert executor.kv is not None
    assert executor.kv.stats().intents.get("preserve_fallback_recompute", 0) > 0


@pytest.mark.parametrize("policy", ["vllm", "vllm-priority", "sarathi-serve", "edf"])
def test_request_outgrowing_the_whole_pool_is_aborted_with_a_reason(policy: str) -> None:
    """'big' needs 4 + 8 rows to emit its 8th output; the pool has 10 rows."""
    requests = (RequestSpec("big", 0.0, 4, 9), RequestSpec("ok", 0.0, 4, 4))
    online = OnlineWorkload("too-big", "iteration", Capacity(8, 2), requests,
                            kv=KvSpec(10, block_size=1))
    manifest = WorkloadManifest(online, HiddenTruth({"big": 9, "ok": 3}))
    trace = RunTrace()
    policy_made = policy_for(policy, online, {"tau": 8}, strict=False)
    engine = Engine(online, policy_made, make_simulated_executor(manifest), [trace])
    engine.run(max_iterations=200)
    assert engine.is_done
    assert trace.requests["ok"].finish_reason == "stop"
    assert trace.requests["big"].finish_reason == "abort"
