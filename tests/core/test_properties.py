"""Hypothesis properties of the scheduler contract (STYLE habit 12).

States come from real Engine runs on random small workloads (any registered
policy, a random number of steps, random cancellations and readiness loss),
so they are legal by construction of the transition. On each:

* every registered policy returns a plan that validates, deterministically;
* the executed plan yields a result that validates and a successor state
  that validates;
* any single mutation of a valid non-empty plan is a ContractViolation.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iterserve.engine.loop import Engine, EngineStalled, bind_policy
from iterserve.plan.feasibility import InfeasibleRun
from iterserve.policies.registry import policy_for, policy_names
from iterserve.records import codec
from iterserve.records import errors as E
from iterserve.records.plan import IntentKind, IterationPlan, QueueIntent
from iterserve.records.result import IterationResult
from iterserve.records.spec import (
    Capacity,
    HiddenTruth,
    OnlineWorkload,
    RequestSpec,
    WorkloadManifest,
)
from iterserve.records.transition import advance
from iterserve.records.validate import validate_plan, validate_result, validate_state
from iterserve.records.view import WorkKind
from iterserve.sim.executor import SimulatedExecutor
from iterserve.sim.factory import make_simulated_executor

from .helpers import replace

PROPERTY_SETTINGS = settings(max_examples=100, deadline=None, database=None,
                             suppress_health_check=[HealthCheck.too_slow])


@st.composite
def workloads(draw):
    max_num_batched_tokens = draw(st.integers(1, 10))
    n = draw(st.integers(1, 7))
    requests = tuple(
        RequestSpec(
            request_id=f"r{i}",
            arrival=float(draw(st.integers(0, 4))),
            # whole-prompt policies (orca) need prompts that fit one iteration
            num_prompt_tokens=draw(st.integers(1, max_num_batched_tokens)),
            max_output_tokens=draw(st.integers(1, 6)),
            client_id=draw(st.sampled_from(["a", "b", "c"])),
            priority=draw(st.integers(0, 2)),
        )
        for i in range(n)
    )
    # sometimes bounded KV rows (block size 1), enough for any single request,
    # so memory pressure, preemption and rebuild states are reachable
    need = max(r.num_prompt_tokens + r.max_output_tokens for r in requests)
    kv_rows = draw(st.none() | st.integers(need, need + 6))
    capacity = Capacity(max_num_batched_tokens, draw(st.integers(1, 4)), kv_rows=kv_rows)
    hidden = HiddenTruth({r.request_id: draw(st.integers(1, 8)) for r in requests})
    settings = {"chunk_size": draw(st.integers(1, 4))}
    return OnlineWorkload("prop", "iteration", capacity, requests,
                          policy_settings=settings), hidden


@st.composite
def legal_states(draw):
    """(online workload, hidden truth, state): a cut reached by a real engine run,
    then optionally a recompute preemption and lost readiness facts."""
    online, hidden = draw(workloads())
    name = draw(st.sampled_from(policy_names()))
    try:
        engine = Engine(online, policy_for(name, online),
                        make_simulated_executor(WorkloadManifest(online, hidden)))
    except InfeasibleRun:  # no preemption path on this pool (issue 14): reach a cut with vllm
        engine = Engine(online, policy_for("vllm", online),
                        make_simulated_executor(WorkloadManifest(online, hidden)))
    for _ in range(draw(st.integers(0, 16))):
        if engine.is_done:
            break
        try:
            engine.step()
        except EngineStalled:  # a policy without preemption can deadlock on KV;
            break              # the state it stalled on is still a published cut
        live = sorted(engine.state.waiting + engine.state.running)
        if live and draw(st.integers(0, 9)) == 0:  # occasional client cancellation
            engine.cancel(draw(st.sampled_from(live)))
    state = engine.state
    decoding = sorted(r for r in state.running if state.views[r].is_decoding)
    if decoding and draw(st.booleans()):  # a recompute preemption: rebuild states
        state = _preempt(state, state.views[draw(st.sampled_from(decoding))])
    live = sorted(state.waiting + state.running)
    unready = draw(st.sets(st.sampled_from(live), max_size=2)) if live else set()
    if unready:  # a foreign readiness fact goes false: a new snapshot
        views = dict(state.views)
        for rid in unready:
            v = views[rid]
            views[rid] = replace(v, is_ready=False, snapshot_version=v.snapshot_version + 1)
        state = replace(state, views=views)
    return online, hidden, state


def _preempt(state, view):
    """Publish a validated, intents-only PREEMPT_RECOMPUTE decision (0x0C)."""
    plan = IterationPlan(state.decision_id, state.state_version, "test", "1", (), 0, 0, (),
                         (QueueIntent(IntentKind.PREEMPT_RECOMPUTE, view.request_id,
                                      view.generation),))
    result = IterationResult(plan.decision_id, plan.input_state_version, (), duration=0.0)
    validate_plan(OnlineWorkload("preempt", "iteration", Capacity(1, 1), ()), state, plan)
    validate_result(plan, state, result)
    after = advance(state, plan, result)
    assert after.views[view.request_id].is_rebuilding
    return after


def _plan_bytes(plan):
    return codec.dumps(codec.plan_to_json(plan))


@PROPERTY_SETTINGS
@given(legal_states())
def test_every_policy_plans_legally_on_every_reachable_state(case):
    online, hidden, state = case
    validate_state(state)
    for name in policy_names():
        policy = policy_for(name, online)
        bound = bind_policy(online, policy)
        plan = policy.choose(state)
        validate_plan(bound, state, plan)
        assert _plan_bytes(policy.choose(state)) == _plan_bytes(plan), name
        assert plan.tokens_used <= state.max_num_batched_tokens
        assert plan.sequences_used <= state.max_num_seqs
        chosen = {w.request_id for w in plan.work}
        assert all(state.views[r].is_ready and not state.views[r].is_terminal for r in chosen)
        if plan.work:
            result = SimulatedExecutor(hidden).execute(plan, state)
            validate_result(plan, state, result)
            after = advance(state, plan, result)
            validate_state(after)
            assert after.state_version == state.state_version + 1
            for c in result.completed:  # only completed progress is published
                view = after.views[c.request_id]
                assert view.num_computed == view.num_committed == c.end
                before = state.views[c.request_id]
                assert view.num_emitted == before.num_emitted + int(c.emitted)


MUTATIONS = ("shift-start", "extend-end", "change-kind", "change-generation",
             "change-snapshot", "drop-tie-break-value", "change-tokens-used", "duplicate-item")
EXPECTED = {
    "shift-start": (E.IntervalBeforeFrontier,),
    "extend-end": (E.MultiRowDecode, E.IntervalBeyondTarget, E.LedgerDrift),
    "change-kind": (E.ForgedKind,),
    "change-generation": (E.StaleGeneration,),
    "change-snapshot": (E.StaleSnapshot,),
    "drop-tie-break-value": (E.ForgedTieBreak,),
    "change-tokens-used": (E.LedgerDrift,),
    "duplicate-item": (E.DuplicateWork,),
}


def _mutate(plan, mutation, index, delta, kind_pick):
    work = list(plan.work)
    item = work[index]
    if mutation == "shift-start":
        s, e = item.start + delta, item.end + delta
        work[index] = replace(item, start=s, end=e, positions=range(s, e))
    elif mutation == "extend-end":
        work[index] = replace(item, end=item.end + 1, positions=range(item.start, item.end + 1))
    elif mutation == "change-kind":
        others = [k for k in WorkKind if k is not item.kind]
        work[index] = replace(item, kind=others[kind_pick % len(others)])
    elif mutation == "change-generation":
        work[index] = replace(item, generation=item.generation + delta)
    elif mutation == "change-snapshot":
        work[index] = replace(item, snapshot_version=item.snapshot_version + delta)
    elif mutation == "drop-tie-break-value":
        work[index] = replace(item, tie_break=item.tie_break[:-1])
    elif mutation == "change-tokens-used":
        return replace(plan, tokens_used=plan.tokens_used + delta)
    elif mutation == "duplicate-item":
        work.insert(index + 1, item)
    return replace(plan, work=tuple(work))


@PROPERTY_SETTINGS
@given(case=legal_states(), policy_name=st.sampled_from(policy_names()),
       mutation=st.sampled_from(MUTATIONS), pick=st.integers(0, 1000),
       delta=st.sampled_from([-1, 1]), kind_pick=st.integers(0, 1))
def test_a_single_mutation_of_a_valid_plan_is_rejected(case, policy_name, mutation, pick,
                                                       delta, kind_pick):
    online, _, state = case
    policy = policy_for(policy_name, online)
    bound = bind_policy(online, policy)
    plan = policy.choose(state)
    if not plan.work:
        return  # nothing to mutate; the legality property covers empty plans
    validate_plan(bound, state, plan)
    forged = _mutate(plan, mutation, pick % len(plan.work), delta, kind_pick)
    with pytest.raises(E.ContractViolation) as info:
        validate_plan(bound, state, forged)
    assert isinstance(info.value, EXPECTED[mutation]), f"{mutation}: {info.value!r}"
