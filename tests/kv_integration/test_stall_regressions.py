"""Issue 14 part 1: each stall the issue names, as a run that now finishes
with every request accounted for. Each of these stopped with "chose
nothing" (``EngineStalled``) before the fix."""

from __future__ import annotations

import pytest

from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.policies.registry import make_policy
from iterserve.records.plan import IntentKind
from iterserve.records.spec import (
    Capacity,
    HiddenTruth,
    KvSpec,
    OnlineWorkload,
    RequestSpec,
    WorkloadManifest,
)
from iterserve.sim.factory import make_simulated_executor

ROOMY = Capacity(32, 4)
PREEMPTING = ["vllm", "vllm-priority", "sarathi-serve", "edf", "least-slack"]


class Ends(EngineObserver):
    """request id -> (decision id, 'abort:<reason>' or the finish reason)."""

    def __init__(self) -> None:
        self.ends: dict[str, tuple[int, str]] = {}

    def on_step(self, state, plan, result, successor) -> None:
        for intent in plan.intents:
            if intent.kind is IntentKind.ABORT:
                self.ends[intent.request_id] = (state.decision_id, f"abort:{intent.reason}")
        for item in result.completed:
            reason = successor.views[item.request_id].finish_reason
            if reason is not None:
                self.ends[item.request_id] = (state.decision_id, reason.value)


def _run(policy: str, requests: tuple[RequestSpec, ...], kv: KvSpec,
         capacity: Capacity = ROOMY, realized: dict[str, int] | None = None):
    hidden = HiddenTruth(realized or {r.request_id: r.max_output_tokens for r in requests})
    manifest = WorkloadManifest(OnlineWorkload("stall", "iteration", capacity, requests, kv=kv),
                                hidden)
    executor = make_simulated_executor(manifest)
    ends = Ends()
    engine = Engine(manifest.online, make_policy(policy), executor, [ends])
    engine.run(max_iterations=10_000)
    assert engine.is_done
    assert executor.kv is not None and executor.kv.manager.audit().num_blocks_used == 0
    return ends.ends


@pytest.mark.parametrize("policy", PREEMPTING)
@pytest.mark.parametrize("num_host_blocks", [0, 3, 64])
def test_a_running_request_that_outgrows_the_pool_is_aborted_in_preserve_mode(
        policy: str, num_host_blocks: int) -> None:
    # 4 blocks of 2 rows: "long" needs p + e = 9 rows for its 6th token
    requests = (RequestSpec("long", 0.0, 4, 12), RequestSpec("short", 0.0, 2, 3),
                RequestSpec("late", 3.0, 3, 4))
    kv = KvSpec(4, 2, num_host_blocks, preemption_mode="swap")
    ends = _run(policy, requests, kv)
    assert ends["long"][1] == "abort:exceeds_kv_capacity"
    assert ends["short"][1] == ends["late"][1] == "length"


@pytest.mark.parametrize("policy", PREEMPTING)
def test_a_suspended_request_that_can_never_resume_is_aborted(policy: str) -> None:
    """Two long requests preempt each other into the host pool until each
    is aborted as its next step passes the pool; nothing waits forever."""
    requests = (RequestSpec("a", 0.0, 3, 10), RequestSpec("b", 0.0, 3, 10),
                RequestSpec("c", 1.0, 2, 2))
    ends = _run(policy, requests, KvSpec(3, 2, 8, preemption_mode="swap"))
    assert ends["a"][1] == ends["b"][1] == "abort:exceeds_kv_capacity"
    assert ends["c"][1] == "length"


@pytest.mark.parametrize("policy", ["vllm", "vllm-priority", "orca"])
@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_a_prompt_larger_than_the_pool_does_not_block_a_small_one(policy: str, mode: str) -> None:
    requests = (RequestSpec("huge", 0.0, 20, 2), RequestSpec("small", 0.0, 2, 2))
    ends = _run(policy, requests, KvSpec(4, 2, 8, preemption_mode=mode))
    assert ends["huge"] == (0, "abort:exceeds_kv_capacity")  # the first decision proves it
    assert ends["small"][1] == "length"


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_orca_aborts_a_request_whose_reservation_exceeds_the_pool(mode: str) -> None:
    """ORCA reserves prompt + max_tokens rows; 4 + 11 > 13 rows can never be
    reserved, so it no longer blocks the younger request behind it."""
    requests = (RequestSpec("r0", 2.0, 2, 3), RequestSpec("r1", 1.0, 4, 11))
    ends = _run("orca", requests, KvSpec(13, 1, 15, preemption_mode=mode),
                Capacity(13, 6), {"r0": 2, "r1": 5})
    assert ends["r1"][1] == "abort:exceeds_kv_capacity"
    assert ends["r0"][1] == "stop"


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_orca_with_n_slots_above_the_pool_preempts_instead_of_stalling(mode: str) -> None:
    """n_slots (setting kv_rows=100) larger than the 4-row pool: both requests
    are initiated, fill the pool and each needs one more row. The youngest
    is preempted by recompute, the oldest finishes, then the youngest."""
    requests = (RequestSpec("old", 0.0, 1, 4), RequestSpec("young", 0.0, 1, 4))
    hidden = HiddenTruth({"old": 4, "young": 4})
    online = OnlineWorkload("stall", "iteration", Capacity(8, 4), requests,
                            kv=KvSpec(4, 1, 8, preemption_mode=mode))
    executor = make_simulated_executor(WorkloadManifest(online, hidden))
    ends = Ends()
    engine = Engine(online, make_policy("orca", kv_rows=100), executor, [ends])
    engine.run(max_iterations=1000)
    assert engine.is_done
    assert ends.ends["old"][1] == ends.ends["young"][1] == "length"
    assert ends.ends["old"][0] < ends.ends["young"][0]
