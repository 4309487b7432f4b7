"""The running pass's batched decode path equals the row-by-row path.

:meth:`PlanBuilder.add_decode_rows` gives runs of plain decode steps their
one row in one loop; ``tests/oracles/running_pass_reference.py`` is the
oracle that walks every request through ``add_or_preempt``. On random running
queues (decode, prefill, rebuild and unready requests; blocks that open on
a row or not; tight token, sequence and KV ledgers, so preemption happens)
both must leave the same plan, the same queue and the same victims.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iterserve.plan.builder import PlanBuilder
from iterserve.plan.passes import running_pass
from iterserve.plan.victims import fcfs_victim, priority_victim
from iterserve.policies.registry import make_policy
from iterserve.records import codec
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.records.view import Lifecycle, RequestView
from oracles import running_pass_reference as oracle

SETTINGS = settings(max_examples=300, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def running_views(draw, index: int) -> RequestView:
    p = draw(st.integers(1, 40))
    phase = draw(st.sampled_from(["decode", "decode", "decode", "prefill", "rebuild"]))
    if phase == "prefill":
        e, c = 0, draw(st.integers(0, p - 1))
    else:
        e = draw(st.integers(1, 20))
        c = p + e - 1 if phase == "decode" else draw(st.integers(0, p + e - 2))
    return RequestView(f"r{index:02d}", draw(st.integers(0, 1)), draw(st.integers(0, 3)),
                       "a", draw(st.integers(0, 2)), float(index), index, p, 64,
                       num_emitted=e, num_computed=c, num_committed=c,
                       lifecycle=Lifecycle.RUNNING, is_ready=draw(st.booleans()) or
                       draw(st.booleans()))


@st.composite
def running_states(draw) -> SchedulerState:
    n = draw(st.integers(0, 24))
    views = [draw(running_views(i)) for i in range(n)]
    order = draw(st.permutations(views))
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    bounded = draw(st.booleans())
    total = 10_000 if bounded else None
    free = draw(st.integers(0, 12)) if bounded else None
    return SchedulerState(
        decision_id=3, state_version=5, now=0.0, waiting=(),
        running=tuple(v.request_id for v in order), suspended=(), finished=(),
        views={v.request_id: v for v in views},
        max_num_batched_tokens=draw(st.integers(1, 60)), max_num_seqs=draw(st.integers(1, 30)),
        capacity=CapacityFacts(block_size, total, free),
    )


def _pass(state: SchedulerState, policy_name: str, batch: bool, rows: str,
          chosen: tuple[str, ...] = ()) -> tuple:
    policy = make_policy(policy_name)
    builder = PlanBuilder(policy, state)
    for rid in chosen:  # chosen before the pass: both paths must pass over them
        builder.add(state.views[rid], 1)
    rows_of = {"within": builder.rows_within_tokens, "one": lambda view: 1,
               "capped": lambda view: min(builder.rows_within_tokens(view), 3)}[rows]
    skip = (lambda view: not view.is_decoding) if rows == "one" else None
    chooser = priority_victim if policy_name == "vllm-priority" else fcfs_victim
    running = [state.views[rid] for rid in state.running]
    walk = running_pass if batch else oracle.running_pass
    done = walk(builder, running, rows_of, chooser, skip)
    plan = codec.dumps(codec.plan_to_json(builder.build()))
    return plan, [v.request_id for v in done.queue], sorted(done.gone), builder.num_blocks_free


@SETTINGS
@given(state=running_states(), policy_name=st.sampled_from(["vllm", "vllm-priority"]),
       rows=st.sampled_from(["within", "one", "capped"]))
def test_batched_decode_rows_equal_the_row_by_row_pass(state, policy_name, rows):
    assert _pass(state, policy_name, True, rows) == _pass(state, policy_name, False, rows)


@SETTINGS
@given(state=running_states(), data=st.data())
def test_batched_decode_rows_pass_over_requests_already_chosen(state, data):
    chosen = tuple(data.draw(st.lists(st.sampled_from(state.running), unique=True,
                                      max_size=4))) if state.running else ()
    assert (_pass(state, "vllm", True, "within", chosen)
            == _pass(state, "vllm", False, "within", chosen))


def test_a_decode_run_is_taken_in_one_call_and_stops_at_a_shortfall():
    """Three decode steps, the third opening a block with none free: the
    batch takes two, then hands the third to the preempting path."""
    views = [RequestView(f"r{i}", 0, 0, "a", 0, 0.0, i, 4, 64, num_emitted=e,
                         num_computed=4 + e - 1, num_committed=4 + e - 1,
                         lifecycle=Lifecycle.RUNNING) for i, e in enumerate((2, 3, 1))]
    state = SchedulerState(3, 5, 0.0, (), ("r0", "r1", "r2"), (), (),
                           {v.request_id: v for v in views}, 16, 8,
                           capacity=CapacityFacts(4, 100, 0))
    builder = PlanBuilder(make_policy("vllm"), state)
    assert builder.add_decode_rows(views, 0) == 2  # r2 sits at c=4: a new block
    assert builder.tokens_left == 14 and builder.seqs_left == 6
    assert [item.request_id for item in builder.build().work] == ["r0", "r1"]


def test_a_batched_row_that_opened_a_block_refunds_it_when_unscheduled():
    """r0's row opens a block (c=4, block size 4), r1's does not: taking
    both charges one block; preempting r0 refunds its row's block and the
    block it held, unscheduling r1 refunds none."""
    views = [RequestView(f"r{i}", 0, 0, "a", 0, 0.0, i, 4, 64, num_emitted=e,
                         num_computed=4 + e - 1, num_committed=4 + e - 1,
                         lifecycle=Lifecycle.RUNNING) for i, e in enumerate((1, 2))]
    state = SchedulerState(3, 5, 0.0, (), ("r0", "r1"), (), (),
                           {v.request_id: v for v in views}, 16, 8,
                           capacity=CapacityFacts(4, 100, 3))
    builder = PlanBuilder(make_policy("vllm"), state)
    assert builder.add_decode_rows(views, 0) == 2
    assert builder.num_blocks_free == 2 and builder.tokens_left == 14
    builder.unschedule(views[1])
    assert builder.num_blocks_free == 2 and builder.tokens_left == 15
    builder.preempt(views[0])
    assert builder.num_blocks_free == 2 + 1 + 1  # its row's block, then the one it held
    assert builder.build().work == ()
