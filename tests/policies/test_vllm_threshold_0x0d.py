"""The ``vllm`` policy's long-prefill threshold at vLLM 0.32's rules
(scheduler.py, the block after "nobody to starve"): off for a lone request,
an opt-in adaptive floor ``max(threshold, input_budget // num_eligible)``;
and vLLM's ``enable_chunked_prefill=0`` and ``max_num_partial_prefills``
(v0.23.0) settings. Every expectation is worked out by hand in its test."""

from __future__ import annotations

import pytest
from policy_helpers import choose_validated, state_of, waiting_view, workload_for

from iterserve.policies.registry import make_policy
from iterserve.records.spec import Capacity
from iterserve.records.view import Lifecycle, RequestView

POLICIES = ["vllm", "vllm-priority"]


def _rows(policy_name: str, views: list[RequestView], budget: int = 16,
          **settings: int) -> list[tuple[str, int, int]]:
    state = state_of(views, max_num_batched_tokens=budget, max_num_seqs=8)
    workload = workload_for(state, Capacity(max_num_batched_tokens=budget, max_num_seqs=8))
    _, plan = choose_validated(make_policy(policy_name, **settings), workload, state)
    return [(w.request_id, w.start, w.end) for w in plan.work]


def _partial(request_id: str, order: int, *, num_prompt: int, num_computed: int) -> RequestView:
    view = waiting_view(request_id, order, num_prompt=num_prompt)
    return view._replace(lifecycle=Lifecycle.RUNNING, snapshot_version=5,
                         num_computed=num_computed, num_committed=num_computed)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_lone_waiting_request_is_not_cut_by_the_threshold(policy) -> None:
    # one request: nobody to starve, so its whole 10-row prompt fits the 16-token budget
    assert _rows(policy, [waiting_view("W", 0, num_prompt=10)],
                 long_prefill_token_threshold=4) == [("W", 0, 10)]
    # iterserve's earlier rule, kept behind its own setting: cut to 4
    assert _rows(policy, [waiting_view("W", 0, num_prompt=10)], long_prefill_token_threshold=4,
                 long_prefill_token_threshold_caps_lone_request=1) == [("W", 0, 4)]


@pytest.mark.parametrize("policy", POLICIES)
def test_a_lone_running_prefill_takes_the_rest_of_its_prompt(policy) -> None:
    # computed 4 of 10: 6 rows left, under the 16-token budget
    assert _rows(policy, [_partial("P", 0, num_prompt=10, num_computed=4)],
                 long_prefill_token_threshold=4) == [("P", 4, 10)]
    # the budget still binds a lone request: 16 rows of a 40-row prompt
    assert _rows(policy, [waiting_view("W", 0, num_prompt=40)],
                 long_prefill_token_threshold=4) == [("W", 0, 16)]


@pytest.mark.parametrize("policy", POLICIES)
def test_two_requests_are_each_cut_to_the_threshold(policy) -> None:
    views = [waiting_view("W", 0, num_prompt=10), waiting_view("X", 1, num_prompt=10)]
    assert _rows(policy, views, long_prefill_token_threshold=4) == [("W", 0, 4), ("X", 0, 4)]


@pytest.mark.parametrize("policy", POLICIES)
def test_the_adaptive_floor_is_a_fair_share_of_the_input_budget(policy) -> None:
    views = [waiting_view(name, i, num_prompt=10) for i, name in enumerate("ABC")]
    # three eligible, budget 16: floor 16 // 3 = 5 > threshold 2, so 5 rows each (15 tokens)
    assert _rows(policy, views, long_prefill_token_threshold=2,
                 long_prefill_token_threshold_adaptive=1) == [("A", 0, 5), ("B", 0, 5),
                                                              ("C", 0, 5)]
    # max_num_batched_tokens 12 is the input budget: 12 // 3 = 4 rows each
    assert _rows(policy, views, long_prefill_token_threshold=2, max_num_batched_tokens=12,
                 long_prefill_token_threshold_adaptive=1) == [("A", 0, 4), ("B", 0, 4),
                                                              ("C", 0, 4)]
    # a floor below the threshold changes nothing: 16 // 3 = 5 < 6
    assert _rows(policy, views, long_prefill_token_threshold=6,
                 long_prefill_token_threshold_adaptive=1) == [("A", 0, 6), ("B", 0, 6),
                                                              ("C", 0, 4)]
    # off by default: threshold 2 each
    assert _rows(policy, views, long_prefill_token_threshold=2) == [("A", 0, 2), ("B", 0, 2),
                                                                    ("C", 0, 2)]


def test_the_adaptive_floor_needs_a_threshold() -> None:
    # vLLM applies the floor only to an active threshold: with none, prompts chunk to the budget
    views = [waiting_view("A", 0, num_prompt=10), waiting_view("B", 1, num_prompt=10)]
    assert _rows("vllm", views, long_prefill_token_threshold_adaptive=1) == [("A", 0, 10),
                                                                           ("B", 0, 6)]


def test_without_chunked_prefill_the_waiting_pass_stops_at_a_prompt_over_the_tokens_left() -> None:
    views = [waiting_view("A", 0, num_prompt=5), waiting_view("B", 1, num_prompt=5),
             waiting_view("C", 2, num_prompt=1)]
    # chunked (default): A 5, B 3 of 5 (budget 8 spent)
    assert _rows("vllm", views, budget=8) == [("A", 0, 5), ("B", 0, 3)]
    # unchunked: A 5, then B's 5 > 3 left stops the pass (C is not reached)
    assert _rows("vllm", views, budget=8, enable_chunked_prefill=0) == [("A", 0, 5)]
    # the threshold applies first (vLLM clamps before the check): B's 2 fit, then C's 1
    assert _rows("vllm", views, budget=8, enable_chunked_prefill=0,
                 long_prefill_token_threshold=2) == [("A", 0, 2), ("B", 0, 2), ("C", 0, 1)]


def test_concurrent_partial_prefills_default_the_threshold_to_4_percent_of_model_length() -> None:
    views = [waiting_view("A", 0, num_prompt=10), waiting_view("B", 1, num_prompt=10)]
    # int(100 * 0.04) = 4
    assert _rows("vllm", views, max_num_partial_prefills=2, max_model_len=100) == [
        ("A", 0, 4), ("B", 0, 4)]
    # an explicit threshold wins; int(20 * 0.04) = 0 means no threshold
    assert _rows("vllm", views, max_num_partial_prefills=2, max_model_len=100,
                 long_prefill_token_threshold=3) == [("A", 0, 3), ("B", 0, 3)]
    assert _rows("vllm", views, max_num_partial_prefills=2, max_model_len=20) == [
        ("A", 0, 10), ("B", 0, 6)]
