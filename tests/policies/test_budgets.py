"""0x05: the token ledger and the sequence ledger are separate questions,
both checked on every plan, and the KV ledger counts new blocks against free
blocks. The B_tok = 6, B_seq = 3 counterexamples: three prefills fit the
sequence budget but overflow the token budget; four one-row decodes fit the
token budget but overflow the sequence budget."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_helpers import choose_validated, decoding_view, state_of, waiting_view, workload_for

from iterserve.engine.loop import bind_policy
from iterserve.policies.registry import make_policy, policy_for, policy_names
from iterserve.records import errors as E
from iterserve.records.plan import IntentKind, IterationPlan, QueueIntent, make_work
from iterserve.records.spec import Capacity
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.records.validate import validate_plan
from iterserve.records.view import Lifecycle, RequestView

B_TOK, B_SEQ = 6, 3
POLICY = make_policy("vllm")


def plan_for(state: SchedulerState, intervals: list[tuple[str, int, int]]) -> IterationPlan:
    """An honest plan (ledger, kinds, positions, identity) with ``intervals``;
    waiting requests are admitted."""
    work, intents = [], []
    for rid, start, end in intervals:
        view = state.view(rid)
        work.append(make_work(rid, view.generation, view.snapshot_version, start, end,
                              view.next_kind))
        if view.lifecycle is Lifecycle.WAITING:
            intents.append(QueueIntent(IntentKind.ADMIT, rid, view.generation))
    return IterationPlan(
        decision_id=state.decision_id, input_state_version=state.state_version,
        policy_id=POLICY.policy_id, policy_version=POLICY.policy_version, work=tuple(work),
        tokens_used=sum(w.width for w in work), sequences_used=len(work),
        intents=tuple(intents),
    )


def check(state: SchedulerState, plan: IterationPlan) -> None:
    workload = workload_for(state, Capacity(state.max_num_batched_tokens, state.max_num_seqs))
    validate_plan(bind_policy(workload, POLICY), state, plan)


def test_three_prefills_fit_sequences_but_overflow_tokens() -> None:
    state = state_of([waiting_view(f"p{i}", i, num_prompt=8) for i in range(3)],
                     max_num_batched_tokens=B_TOK, max_num_seqs=B_SEQ)
    check(state, plan_for(state, [("p0", 0, 2), ("p1", 0, 2), ("p2", 0, 2)]))  # 6 tokens, 3 seqs
    with pytest.raises(E.TokenBudgetExceeded):
        check(state, plan_for(state, [("p0", 0, 2), ("p1", 0, 2), ("p2", 0, 3)]))


def test_four_decodes_fit_tokens_but_overflow_sequences() -> None:
    views = [decoding_view(f"d{i}", i, num_prompt=4, num_emitted=2) for i in range(4)]
    state = state_of(views, max_num_batched_tokens=B_TOK, max_num_seqs=B_SEQ)
    check(state, plan_for(state, [(f"d{i}", 5, 6) for i in range(3)]))  # 3 tokens, 3 seqs
    with pytest.raises(E.SequenceBudgetExceeded):
        check(state, plan_for(state, [(f"d{i}", 5, 6) for i in range(4)]))


def test_ledger_drift_is_rejected_even_within_budget() -> None:
    state = state_of([waiting_view("p0", 0, num_prompt=8)], max_num_batched_tokens=B_TOK,
                     max_num_seqs=B_SEQ)
    plan = plan_for(state, [("p0", 0, 4)])
    with pytest.raises(E.LedgerDrift):
        check(state, dataclasses.replace(plan, tokens_used=3))


@pytest.mark.parametrize("policy_name", policy_names())
def test_every_policy_respects_both_ledgers_on_the_counterexample_state(policy_name) -> None:
    views = [decoding_view(f"d{i}", i, num_prompt=4, num_emitted=2) for i in range(4)]
    views += [waiting_view(f"p{i}", 4 + i, num_prompt=8) for i in range(3)]
    state = state_of(views, max_num_batched_tokens=B_TOK, max_num_seqs=B_SEQ)
    capacity = Capacity(B_TOK, B_SEQ)
    knobs = dict(chunk_size=2, tau=B_TOK, long_prefill_token_threshold=2)
    policy = policy_for(policy_name, None, knobs, strict=False)
    _, plan = choose_validated(policy, workload_for(state, capacity), state)
    assert plan.tokens_used <= B_TOK and plan.sequences_used <= B_SEQ
    assert plan.work, f"{policy_name} chose nothing with work available"


def test_new_kv_blocks_beyond_free_blocks_are_rejected() -> None:
    """Block size 4, one free block: 4 new rows fit, 5 need a second block;
    a decode row into a partly filled block needs no new block at all."""
    facts = CapacityFacts(block_size=4, num_blocks_total=4, num_blocks_free=1)
    views = [waiting_view("p0", 0, num_prompt=8),
             decoding_view("d0", 1, num_prompt=3, num_emitted=1)]  # c = 3: block has room
    state = state_of(views, max_num_batched_tokens=16, max_num_seqs=4, capacity=facts)
    check(state, plan_for(state, [("p0", 0, 4), ("d0", 3, 4)]))
    with pytest.raises(E.KvCapacityExceeded):
        check(state, plan_for(state, [("p0", 0, 5)]))
    full = state_of(views, max_num_batched_tokens=16, max_num_seqs=4,
                    capacity=CapacityFacts(block_size=4, num_blocks_total=4, num_blocks_free=0))
    check(full, plan_for(full, [("d0", 3, 4)]))
    with pytest.raises(E.KvCapacityExceeded):
        check(full, plan_for(full, [("p0", 0, 1)]))


@st.composite
def prefill_case(draw) -> tuple[RequestView, int]:
    """A request mid-prefill (RUNNING, 0 < c < p) or not yet started
    (WAITING, c = 0), and a width 1 <= w <= p - c."""
    num_prompt = draw(st.integers(1, 96))
    computed = draw(st.integers(0, num_prompt - 1))
    view = waiting_view("r", 0, num_prompt=num_prompt)
    if computed:
        view = view._replace(num_computed=computed, num_committed=computed,
                             lifecycle=Lifecycle.RUNNING, snapshot_version=3)
    return view, draw(st.integers(1, num_prompt - computed))


@settings(max_examples=200, deadline=None)
@given(case=prefill_case(), block_size=st.sampled_from([1, 4, 16]))
def test_any_legal_prefill_width_validates(case, block_size: int) -> None:
    view, width = case
    c, p = view.num_computed, view.num_prompt_tokens
    facts = CapacityFacts(block_size, 64, -(-p // block_size))  # room for the whole prompt
    state = state_of([view], max_num_batched_tokens=width, max_num_seqs=1, capacity=facts)
    check(state, plan_for(state, [("r", c, c + width)]))
    if c + width == p:
        with pytest.raises(E.IntervalBeyondTarget):
            check(state, plan_for(state, [("r", c, p + 1)]))
    else:
        with pytest.raises(E.TokenBudgetExceeded):
            check(state, plan_for(state, [("r", c, c + width + 1)]))
