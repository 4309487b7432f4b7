"""Issue 14 part 1, the property: under every registered policy, both
preemption modes, random tiny pools and random small workloads, a run either
finishes with every request accounted for (finished stop/length, or aborted
``exceeds_kv_capacity`` because its next step really exceeded the pool),
nothing left live and no block leaked, or it is refused before the first
decision with :class:`InfeasibleRun` (one line), and then only for a policy
without a preemption path (or orca's whole-prompt prefill over the token
budget). ``EngineStalled`` is never an outcome."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.plan.feasibility import InfeasibleRun, RunningSet
from iterserve.policies.registry import make_policy, policy_names
from iterserve.records.plan import IntentKind
from iterserve.records.spec import (
    Capacity,
    HiddenTruth,
    KvSpec,
    OnlineWorkload,
    RequestSpec,
    WorkloadManifest,
)
from iterserve.records.view import Lifecycle
from iterserve.sim.factory import make_simulated_executor


class Outcomes(EngineObserver):
    """Each request's terminal outcome; for aborts, the intent's reason and
    the rows its next step needed (p + e) with the pool's rows then."""

    def __init__(self) -> None:
        self.ends: dict[str, str] = {}
        self.abort_rows: dict[str, tuple[int, int]] = {}

    def on_step(self, state, plan, result, successor) -> None:
        facts = state.capacity
        for intent in plan.intents:
            if intent.kind is IntentKind.ABORT:
                view = state.views[intent.request_id]
                self.ends[intent.request_id] = f"abort:{intent.reason}"
                assert facts.num_blocks_total is not None
                self.abort_rows[intent.request_id] = (
                    facts.blocks_for(view.num_prompt_tokens + view.num_emitted),
                    facts.num_blocks_total)
        for item in result.completed:
            after = successor.views[item.request_id]
            if after.lifecycle is Lifecycle.FINISHED:
                assert after.finish_reason is not None
                self.ends[item.request_id] = after.finish_reason.value


@st.composite
def manifests(draw, mode: str) -> WorkloadManifest:
    num_requests = draw(st.integers(1, 6))
    requests = tuple(
        RequestSpec(f"r{i}", float(draw(st.integers(0, 6))), draw(st.integers(1, 24)),
                    draw(st.integers(1, 10)), client_id=f"c{i % 2}",
                    priority=draw(st.integers(0, 2)))
        for i in range(num_requests)
    )
    hidden = HiddenTruth({r.request_id: draw(st.integers(1, r.max_output_tokens))
                          for r in requests})
    num_host = draw(st.integers(0, 40)) if mode == "swap" else 0
    kv = KvSpec(draw(st.integers(2, 40)), draw(st.integers(1, 4)), num_host,
                preemption_mode=mode)
    capacity = Capacity(draw(st.integers(1, 32)), draw(st.integers(1, 6)))
    return WorkloadManifest(OnlineWorkload("stall-prop", "iteration", capacity, requests, kv=kv),
                            hidden)


@settings(max_examples=400, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(policy_names()),
       mode=st.sampled_from(["recompute", "swap"]))
def test_every_run_finishes_accounted_or_is_refused_before_decision_0(data, name, mode) -> None:
    manifest = data.draw(manifests(mode))
    online = manifest.online
    settings_ = {}
    if name == "sarathi":
        settings_["chunk_size"] = data.draw(st.integers(1, 8))
    if name == "orca":  # n_slots below, at or above the pool's rows
        settings_["kv_rows"] = data.draw(st.none() | st.integers(1, 200))
    policy = make_policy(name, **settings_)
    executor = make_simulated_executor(manifest)
    outcomes = Outcomes()
    try:
        engine = Engine(online, policy, executor, [outcomes])
    except InfeasibleRun as exc:
        message = str(exc)
        assert "\n" not in message and name in message
        whole_prompt = getattr(policy, "whole_prompt_prefill", False) and any(
            r.num_prompt_tokens > online.capacity.max_num_batched_tokens for r in online.requests)
        assert whole_prompt or policy.running_set is not RunningSet.PREEMPTS  # type: ignore[attr-defined]
        return
    summary = engine.run(max_iterations=20_000)
    assert engine.is_done and not summary.final_state.has_live
    assert set(outcomes.ends) == {r.request_id for r in online.requests}
    for rid, end in outcomes.ends.items():
        assert end in ("stop", "length", "abort:exceeds_kv_capacity"), (rid, end)
        if end.startswith("abort"):
            needed, total = outcomes.abort_rows[rid]
            if getattr(policy, "whole_prompt_prefill", False) and needed <= total:
                continue  # orca: max_tokens can never be reserved against n_slots
            assert needed > total, (rid, needed, total)
    assert executor.kv is not None
    usage = executor.kv.manager.audit()
    assert usage.num_blocks_used == 0
    assert usage.num_host_blocks_free == online.kv.num_host_blocks  # type: ignore[union-attr]
