"""FastServe's next-iteration-aware demotion in ``mlfq`` (0x09A, Algorithm 1).

Queues are 0-based here (queue 0 is the spec's Q_1); q_j = 2^j ms. The
cases are worked by hand from the rule in ``policies/mlfq_levels.py``: the
job's service replayed as prompt chunks of the budget, then decode rows;
a queue's quantum spent by whole iterations with no carry; a job that
uses up q_p moves to the first lower queue whose quantum covers its next
iteration. The property compares the policy with the hand-run oracle of
``tests/oracles/full_sort_policies.py`` (written apart from the policy).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iterserve.cost import LinearIterationCost
from iterserve.policies.mlfq import Mlfq, MlfqConfig
from iterserve.policies.mlfq_levels import Quanta, iterations_to_deplete
from iterserve.records.state import RunRules, SchedulerState
from iterserve.records.view import RequestView
from oracles.full_sort_policies import mlfq_queue


def policy(prefill_ms: float = 1, decode_ms: float = 1, num_queues: int = 5,
           base_ms: float = 0.0, alpha_ms: float = 300.0) -> Mlfq:
    model = LinearIterationCost(base_ms, prefill_ms, decode_ms)
    return Mlfq(MlfqConfig(num_queues=num_queues, alpha_ms=alpha_ms, cost_model=model))


def state(budget: int = 4, now: float = 0.0) -> SchedulerState:
    return SchedulerState(0, 0, now, (), (), (), (), {}, budget, 1, rules=RunRules("ms"))


def view(prompt: int, computed: int = 0, emitted: int = 0,
         last_output: float | None = None) -> RequestView:
    if emitted and last_output is None:
        last_output = 0.0
    return RequestView("r", 0, 0, "c", 0, 0.0, 0, prompt, 128, num_emitted=emitted,
                       num_computed=computed, num_committed=computed,
                       last_output_time=last_output)


def decoding(prompt: int, emitted: int) -> RequestView:
    return view(prompt, prompt + emitted - 1, emitted)


def test_the_distance_is_to_the_first_lower_queue_covering_the_next_iteration() -> None:
    quanta = Quanta(1.0, 5)  # 1, 2, 4, 8, 16 ms
    # a job using up Q_1's 1 ms whose next iteration is an 8 ms prompt chunk
    # skips the 2 and 4 ms queues, as skip-join would place that chunk (in
    # FastServe a promoted job mid-prefill; mlfq_levels says why a replay
    # from the skip-join queue never meets it)
    assert quanta.demotion_distance(0, 8.0) == 3
    assert quanta.demotion_distance(0, 5.0) == 3  # 4 ms does not cover 5
    assert quanta.demotion_distance(0, 4.0) == 2
    assert quanta.demotion_distance(1, 0.5) == 1  # a small iteration: one queue
    assert quanta.demotion_distance(2, 100.0) == 2  # none covers it: the bottom queue
    assert quanta.demotion_distance(4, 1.0) == 1  # at the bottom: min(p + eta, m-1) stays


def test_a_decode_job_moves_one_queue_when_its_quantum_is_used_up() -> None:
    mlfq, at = policy(), state()
    # prompt 2: first chunk 2 ms, skip-join into the 2 ms queue (1)
    assert mlfq.queue_level(view(2), at, 1.0) == 1
    # the chunk spends 2 of 2: used up; the next iteration, a 1 ms decode
    # row, fits the 4 ms queue right below: eta = 1
    assert mlfq.queue_level(decoding(2, 1), at, 1.0) == 2
    assert mlfq.queue_level(decoding(2, 4), at, 1.0) == 2  # 3 decode rows: 3 of 4 ms
    assert mlfq.queue_level(decoding(2, 5), at, 1.0) == 3  # the 4th uses it up
    assert mlfq.queue_level(decoding(2, 12), at, 1.0) == 3  # 7 of 8 ms
    assert mlfq.queue_level(decoding(2, 13), at, 1.0) == 4  # 8 of 8: the bottom


def test_a_next_iteration_dearer_than_the_queue_below_skips_it() -> None:
    mlfq, at = policy(decode_ms=3), state()
    # prompt 1: a 1 ms chunk, skip-join into queue 0, which it uses up; its
    # next iteration is a 3 ms decode row, which queue 1 (2 ms) cannot
    # cover: eta = 2, to the 4 ms queue (attained-cost demotion, one queue
    # at a time, stopped at queue 1)
    assert mlfq.queue_level(view(1), at, 1.0) == 0
    assert mlfq.queue_level(decoding(1, 1), at, 1.0) == 2
    assert mlfq.queue_level(decoding(1, 2), at, 1.0) == 2  # 3 of 4 ms
    # the 2nd row brings 6 >= 4; the 2 ms excess is not carried into the 8 ms queue
    assert mlfq.queue_level(decoding(1, 3), at, 1.0) == 3
    assert mlfq.queue_level(decoding(1, 5), at, 1.0) == 3  # 6 of 8 ms
    assert mlfq.queue_level(decoding(1, 6), at, 1.0) == 4  # 9 of 8: the bottom


def test_prompt_chunks_after_skip_join_demote_one_queue_at_a_time() -> None:
    mlfq, at = policy(), state(budget=4)
    # prompt 12 in 4-row chunks of 4 ms: skip-join by the first chunk (not
    # the whole prompt) into the 4 ms queue (2)
    assert mlfq.queue_level(view(12), at, 1.0) == 2
    # the first chunk uses it up; the next, 4 rows = 4 ms, fits the 8 ms queue
    assert mlfq.queue_level(view(12, 4), at, 1.0) == 3
    assert mlfq.queue_level(view(12, 6), at, 1.0) == 3  # then 2 rows: 2 of 8 ms
    assert mlfq.queue_level(view(12, 10), at, 1.0) == 3  # 4 + 2 of 8 ms
    assert mlfq.queue_level(decoding(12, 1), at, 1.0) == 4  # 4 + 4 of 8: the bottom
    # a budget of 8: skip-join into the 8 ms queue, used up by the first chunk
    assert mlfq.queue_level(view(12, 8), state(budget=8), 1.0) == 4


def test_skip_join_is_by_the_first_chunk_and_promotion_is_to_q1() -> None:
    mlfq = policy(alpha_ms=10)
    assert mlfq.queue_level(view(9), state(budget=4), 1.0) == 2  # first chunk 4 rows
    assert mlfq.queue_level(view(9), state(budget=8), 1.0) == 3  # first chunk 8 rows
    deep = decoding(2, 13)  # the bottom queue, last output at 0 ms
    assert mlfq.queue_level(deep, state(now=9.0), 1.0) == 4
    assert mlfq.queue_level(deep, state(now=10.0), 1.0) == 0  # unserved for alpha: Q_1
    waiting = view(9)  # never served: the promotion clock runs from arrival
    assert mlfq.queue_level(waiting, state(budget=4, now=10.0), 1.0) == 0


def test_a_rebuild_moves_no_queue() -> None:
    mlfq, at = policy(decode_ms=3), state()
    # recompute preemption: computed back to 0 with 3 outputs; the rebuild
    # earns no service, so the queue is the decoding job's
    assert mlfq.queue_level(decoding(1, 3), at, 1.0) == 3
    assert mlfq.queue_level(view(1, 0, 3), at, 1.0) == 3
    assert mlfq.queue_level(view(1, 2, 3), at, 1.0) == 3


@pytest.mark.parametrize(("quantum", "spent", "time", "count"), [
    (4.0, 0.0, 1.0, 4), (4.0, 0.0, 3.0, 2), (4.0, 3.0, 3.0, 1), (8.0, 0.0, 8.0, 1),
    (1.0, 0.0, 0.1, 10), (4.0, 0.0, 0.0, None)])
def test_iterations_to_deplete_is_the_fewest_that_reach_the_quantum(
        quantum: float, spent: float, time: float, count: int | None) -> None:
    assert iterations_to_deplete(quantum, spent, time) == count
    if count is not None:
        assert spent + count * time >= quantum
        assert count == 1 or spent + (count - 1) * time < quantum


@settings(max_examples=400, deadline=None)
@given(prompt=st.integers(1, 120), budget=st.integers(1, 32), emitted=st.integers(0, 60),
       computed_fraction=st.floats(0, 1),
       base=st.sampled_from([0.0, 0.5, 1.0, 2.5]),
       prefill=st.sampled_from([0.0, 0.05, 0.25, 1.0, 1.3]),
       decode=st.sampled_from([0.0, 0.5, 1.0, 3.0, 7.5, 20.0]),
       num_queues=st.integers(1, 12), base_quantum=st.sampled_from([0.25, 0.5, 1.0, 3.0]),
       now=st.floats(0, 50), alpha=st.sampled_from([5.0, 1e9, 1e9, 1e9]))
def test_the_policy_agrees_with_the_hand_run_algorithm(
        prompt: int, budget: int, emitted: int, computed_fraction: float, prefill: float,
        decode: float, base: float, num_queues: int, base_quantum: float, now: float,
        alpha: float) -> None:
    """Costs from small sets, so that quanta are met exactly, prompts span
    several chunks and decode rows can be dearer than the next quantum."""
    if base + prefill + decode <= 0:
        base = 1.0
    config = MlfqConfig(num_queues=num_queues, base_quantum_ms=base_quantum, alpha_ms=alpha,
                        cost_model=LinearIterationCost(base, prefill, decode))
    limit = prompt if emitted == 0 else prompt + emitted - 1  # rebuild below the target
    computed = round(limit * computed_fraction)
    request = view(prompt, computed, emitted, last_output=1.0 if emitted else None)
    at = state(budget=budget, now=now)
    assert Mlfq(config).queue_level(request, at, 1.0) == mlfq_queue(config, request, at)
