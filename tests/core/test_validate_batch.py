"""Validation's column passes agree with the row-by-row oracle.

:mod:`iterserve.records.validate_batch` decides a whole plan's work or a
whole result's completions in columns, and :mod:`iterserve.records.validate`
names the first broken rule of what they refuse; the rules stated row by row
are the oracle in ``tests/oracles/validate_reference.py``. These properties
take real decisions (the simulator's engine under several policies, with
chunked prefill, preemption and length stops), corrupt one field of a work
item, a view, an intent or a completion, and require ``validate_plan`` /
``validate_result`` to raise the same named error with the same message as
the oracle, or to accept both. The unmutated decisions must be accepted by the batch passes
themselves, so the comparison is not vacuous; the batch frontier rules are
pinned against their per-item forms.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iterserve.policies.registry import policy_for
from iterserve.records import frontier as F
from iterserve.records import validate as V
from iterserve.records import validate_batch as B
from iterserve.records.kv_abi import blocks_opened_total
from iterserve.records.plan import IntentKind, QueueIntent, WorkItem
from iterserve.records.result import CompletedInterval
from iterserve.records.state import CapacityFacts
from iterserve.records.view import FinishReason, Lifecycle, WorkKind
from iterserve.records.workload import parse_workload
from iterserve.sim.generators import generate_workload
from iterserve.sim.workload_spec import parse_spec
from oracles import validate_reference as oracle

from .helpers import Recorder, random_workload_json, replace

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

#: a tight pool (preemption, rebuild), chunked prefill, length stops, two clients
SPEC = {
    "workload_id": "batch-validation", "seed": 7, "num_requests": 24, "clock": "ms",
    "capacity": {"max_num_batched_tokens": 96, "max_num_seqs": 12},
    "kv": {"num_kv_blocks": 40, "block_size": 8},
    "arrival": {"process": "poisson", "rate_per_s": 400.0},
    "clients": [
        {"client_id": "a", "prompt_tokens": {"kind": "uniform", "min": 4, "max": 120},
         "output_tokens": {"kind": "uniform", "min": 1, "max": 30}},
        {"client_id": "b", "prompt_tokens": {"kind": "uniform", "min": 4, "max": 60},
         "output_tokens": {"kind": "uniform", "min": 1, "max": 30}},
    ],
}
RUNS = [("spec", "vllm"), ("spec", "vllm-priority"), ("random", "vtc"), ("random", "sarathi"),
        ("random", "orca"), ("random", "priority")]


@cache
def decisions() -> tuple[tuple[Any, Any, Any, Any], ...]:
    """(workload, state, plan, result) of every decision with work or intents."""
    from iterserve.engine.loop import Engine
    from iterserve.sim.factory import make_simulated_executor

    found = []
    for source, policy_name in RUNS:
        manifest = (generate_workload(parse_spec(SPEC)) if source == "spec"
                    else parse_workload(random_workload_json(3, num_requests=12)))
        recorder = Recorder()
        engine = Engine(manifest.online_projection(), policy_for(policy_name, manifest.online),
                        make_simulated_executor(manifest), [recorder])
        engine.run()
        found += [(engine.bound_workload, state, plan, result)
                  for state, plan, result, _ in recorder.steps if not plan.is_empty]
    return tuple(found)


def _outcome(check: Callable[[], None]) -> tuple[str, str]:
    try:
        check()
    except Exception as error:  # noqa: BLE001 - the exact outcome is what is compared
        return type(error).__name__, str(error)
    return "accepted", ""


def _plan_outcomes(workload: Any, state: Any, plan: Any) -> tuple[tuple[str, str], ...]:
    batch = _outcome(lambda: V.validate_plan(workload, state, plan))
    rows = _outcome(lambda: oracle.validate_plan(workload, state, plan))
    return batch, rows


def _result_outcomes(state: Any, plan: Any, result: Any) -> tuple[tuple[str, str], ...]:
    batch = _outcome(lambda: V.validate_result(plan, state, result))
    rows = _outcome(lambda: oracle.validate_result(plan, state, result))
    return batch, rows


def test_the_corpus_has_every_shape():
    """Prefill, decode and rebuild rows, preemptions, stops and several clients."""
    steps = decisions()
    kinds = {item.kind for _, _, plan, _ in steps for item in plan.work}
    intents = {intent.kind for _, _, plan, _ in steps for intent in plan.intents}
    finishes = {c.finish_reason for _, _, _, result in steps for c in result.completed}
    assert kinds == set(WorkKind)
    assert IntentKind.PREEMPT_RECOMPUTE in intents and IntentKind.ADMIT in intents
    assert {FinishReason.LENGTH, FinishReason.STOP} <= finishes
    assert len(steps) > 200


def test_valid_decisions_are_accepted_by_the_batch_passes_themselves():
    for workload, state, plan, result in decisions():
        admitted, leaving = V._validate_intents(state, plan)
        columns = B.accepted_work(plan.work, state.views, admitted, leaving)
        assert columns == B.work_columns(plan.work, state.views)
        service = B.accepted_service(plan.work, result.completed, state.views)
        assert service == oracle._completion_service(plan, state, result)
        V.validate_plan(workload, state, plan)
        V.validate_result(plan, state, result)


# --- corrupting one fact ---------------------------------------------------------
PLAN_MUTATIONS = [
    "generation", "snapshot", "start", "end", "span", "kind", "positions", "positions-list",
    "request-id", "unknown-id", "duplicate", "drop", "reverse", "tie-break", "view-ready",
    "view-lifecycle", "view-emitted", "view-computed", "view-prompt", "view-generation",
    "drop-intents", "leave", "tokens-used", "no-blocks",
]
RESULT_MUTATIONS = [
    "generation", "start", "end", "emitted", "finish", "drop", "duplicate", "reverse",
    "request-id", "view-emitted", "view-max-output", "view-client", "view-prompt", "service",
    "missing-view", "planned-end",
]


def _with_view(state: Any, rid: str, **changes: Any) -> Any:
    views = dict(state.views)
    views[rid] = replace(views[rid], **changes)
    return replace(state, views=views)


def _mutate_plan(state: Any, plan: Any, mutation: str, index: int, delta: int,
                 pick: int) -> tuple[Any, Any]:
    work = list(plan.work)
    item: WorkItem = work[index]
    rid = item.request_id
    view = state.views[rid]
    if mutation == "generation":
        work[index] = replace(item, generation=item.generation + delta)
    elif mutation == "snapshot":
        work[index] = replace(item, snapshot_version=item.snapshot_version + delta)
    elif mutation == "start":
        work[index] = replace(item, start=item.start + delta,
                              positions=range(item.start + delta, item.end))
    elif mutation == "end":
        work[index] = replace(item, end=item.end + delta,
                              positions=range(item.start, item.end + delta))
    elif mutation == "span":  # start and end move, positions stay
        work[index] = replace(item, start=item.start + delta, end=item.end + delta)
    elif mutation == "kind":
        work[index] = replace(item, kind=list(WorkKind)[pick % 3])
    elif mutation == "positions":
        work[index] = replace(item, positions=range(item.start + delta, item.end + delta))
    elif mutation == "positions-list":
        work[index] = replace(item, positions=list(item.positions))
    elif mutation == "request-id":
        other = sorted(state.views)[pick % len(state.views)]
        work[index] = replace(item, request_id=other)
    elif mutation == "unknown-id":
        work[index] = replace(item, request_id="ghost")
    elif mutation == "duplicate":
        work.insert(index + pick % 2, item)
    elif mutation == "drop":
        del work[index]
    elif mutation == "reverse":
        work.reverse()
    elif mutation == "tie-break":
        work[index] = replace(item, tie_break=item.tie_break[:-1])
    elif mutation == "view-ready":
        state = _with_view(state, rid, is_ready=False)
    elif mutation == "view-lifecycle":
        state = _with_view(state, rid, lifecycle=list(Lifecycle)[pick % len(Lifecycle)])
    elif mutation == "view-emitted":
        state = _with_view(state, rid, num_emitted=max(0, view.num_emitted + delta))
    elif mutation == "view-computed":
        c = max(0, view.num_computed + delta)
        state = _with_view(state, rid, num_computed=c, num_committed=c)
    elif mutation == "view-prompt":
        state = _with_view(state, rid, num_prompt_tokens=max(1, view.num_prompt_tokens + delta))
    elif mutation == "view-generation":
        state = _with_view(state, rid, generation=view.generation + delta)
    elif mutation == "drop-intents":
        plan = replace(plan, intents=())
    elif mutation == "leave":
        plan = replace(plan, intents=plan.intents + (
            QueueIntent(IntentKind.PREEMPT_RECOMPUTE, rid, item.generation),))
    elif mutation == "tokens-used":
        plan = replace(plan, tokens_used=plan.tokens_used + delta)
    elif mutation == "no-blocks":
        state = replace(state, capacity=CapacityFacts(8, 40, pick % 3))
    if mutation in ("duplicate", "drop", "start", "end", "span"):  # keep the ledger honest
        plan = replace(plan, tokens_used=sum(w.end - w.start for w in work),
                       sequences_used=len(work))
    return state, replace(plan, work=tuple(work))


def _mutate_result(state: Any, plan: Any, result: Any, mutation: str, index: int, delta: int,
                   pick: int) -> tuple[Any, Any, Any]:
    """``(state, plan, result)`` with one fact changed; the plan only by
    ``planned-end``: the item and its completion end elsewhere alike."""
    completed = list(result.completed)
    item: CompletedInterval = completed[index]
    rid = item.request_id
    view = state.views[rid]
    if mutation == "generation":
        completed[index] = item._replace(generation=item.generation + delta)
    elif mutation == "start":
        completed[index] = item._replace(start=item.start + delta)
    elif mutation == "end":
        completed[index] = item._replace(end=item.end + delta)
    elif mutation == "emitted":
        completed[index] = item._replace(emitted=not item.emitted)
    elif mutation == "finish":
        completed[index] = item._replace(finish_reason=[None, *FinishReason][pick % 6])
    elif mutation == "drop":
        del completed[index]
    elif mutation == "duplicate":
        completed.insert(index + pick % 2, item)
    elif mutation == "reverse":
        completed.reverse()
    elif mutation == "request-id":
        completed[index] = item._replace(request_id=sorted(state.views)[pick % len(state.views)])
    elif mutation == "view-emitted":
        state = _with_view(state, rid, num_emitted=max(0, view.num_emitted + delta))
    elif mutation == "view-max-output":
        state = _with_view(state, rid, max_output_tokens=max(1, view.max_output_tokens + delta))
    elif mutation == "view-client":
        state = _with_view(state, rid, client_id="elsewhere")
    elif mutation == "view-prompt":
        state = _with_view(state, rid, num_prompt_tokens=max(1, view.num_prompt_tokens + delta))
    elif mutation == "service":
        service = dict(result.service)
        service[view.client_id] = service.get(view.client_id, 0) + delta
        return state, plan, replace(result, service=service)
    elif mutation == "missing-view":
        views = dict(state.views)
        del views[rid]
        state = replace(state, views=views)
    elif mutation == "planned-end":
        end = item.end + delta
        completed[index] = item._replace(end=end)
        plan = replace(plan, work=tuple(
            replace(w, end=end, positions=range(w.start, end)) if w.request_id == rid else w
            for w in plan.work))
    return state, plan, replace(result, completed=tuple(completed))


@SETTINGS
@given(pick=st.integers(0, 10**6), mutation=st.sampled_from(PLAN_MUTATIONS),
       delta=st.sampled_from([-1, 1]), other=st.integers(0, 1000))
def test_a_corrupted_plan_gets_the_row_by_row_outcome(pick, mutation, delta, other):
    steps = [step for step in decisions() if step[2].work]
    workload, state, plan, _ = steps[pick % len(steps)]
    state, plan = _mutate_plan(state, plan, mutation, pick % len(plan.work), delta, other)
    batch, rows = _plan_outcomes(workload, state, plan)
    assert batch == rows, mutation


@SETTINGS
@given(pick=st.integers(0, 10**6), mutation=st.sampled_from(RESULT_MUTATIONS),
       delta=st.sampled_from([-1, 1]), other=st.integers(0, 1000))
def test_a_corrupted_result_gets_the_row_by_row_outcome(pick, mutation, delta, other):
    steps = [step for step in decisions() if step[3].completed]
    _, state, plan, result = steps[pick % len(steps)]
    state, plan, result = _mutate_result(state, plan, result, mutation,
                                         pick % len(result.completed), delta, other)
    batch, rows = _result_outcomes(state, plan, result)
    assert batch == rows, mutation


@pytest.mark.parametrize("mutation", [m for m in PLAN_MUTATIONS if m != "drop"])
def test_every_plan_mutation_is_refused_somewhere(mutation):
    """Each corruption of the first item, on every early decision, gets the
    row-by-row outcome, and is caught on some decision (the properties
    compare errors, not just acceptances). Dropping an item with
    an honest ledger leaves a legal plan: it exercises the accept path."""
    outcomes = set()
    for workload, state, plan, _ in decisions()[:400]:
        if plan.work:
            for delta in (1, -1):
                forged_state, forged = _mutate_plan(state, plan, mutation, 0, delta, 1)
                batch, rows = _plan_outcomes(workload, forged_state, forged)
                assert batch == rows, (mutation, delta)
                outcomes.add(batch[0])
    assert outcomes - {"accepted"}, mutation


@pytest.mark.parametrize("mutation", [m for m in RESULT_MUTATIONS if m != "reverse"])
def test_every_result_mutation_is_refused_somewhere(mutation):
    """Each corruption of the first completion gets the oracle's outcome and
    is refused on some decision; completions in another order are legal
    (both accept them), so that mutation is left out of the second check."""
    outcomes = set()
    for _, state, plan, result in decisions()[:400]:
        if result.completed:
            for delta in (1, -1):
                batch, rows = _result_outcomes(
                    *_mutate_result(state, plan, result, mutation, 0, delta, 1))
                assert batch == rows, (mutation, delta)
                outcomes.add(batch[0])
    assert outcomes - {"accepted"}, mutation


# --- the batch frontier rules against their per-item forms ------------------------
@st.composite
def rows(draw: st.DrawFn) -> tuple[int, int, int, int]:
    """(p, e, c, end) at and around the decode row, legal or not."""
    p = draw(st.integers(1, 12))
    e = draw(st.integers(0, 5))
    c = draw(st.sampled_from([p + e - 1, p - 1, p + e, max(0, p + e - 2)])
             | st.integers(0, p + e + 1))
    return p, e, c, c + draw(st.sampled_from([1, 0, 2]))


def _decode_rows(items: list[tuple[int, int, int, int]]) -> bool:
    p, e, c, end = (tuple(column) for column in zip(*items, strict=True)) if items else ((),) * 4
    width = tuple(b - a for a, b in zip(c, end, strict=True))
    return F.are_decode_rows(p, e, end, width)


@given(rows())
def test_are_decode_rows_is_interval_kind_decode(item):
    p, e, c, end = item
    assert _decode_rows([item]) is (F.interval_kind(p, e, c, c, end) is F.DECODE)


@given(st.lists(rows(), max_size=6))
def test_are_decode_rows_is_interval_kind_decode_for_each(items):
    expected = all(F.interval_kind(p, e, c, c, end) is F.DECODE for p, e, c, end in items)
    assert _decode_rows(items) is expected


@given(st.lists(st.tuples(st.integers(1, 12), st.integers(0, 8), st.integers(1, 10),
                          st.booleans()), max_size=6))
def test_emit_without_stop_is_completion_service_for_each(items):
    """Decode rows without a finish reason, whatever their frontiers."""
    expected = all(F.completion_service(p, e, limit, F.DECODE, p + e - 1, p + e, emitted, False)
                   is not None for p, e, limit, emitted in items)
    e = tuple(item[1] for item in items)
    limits = tuple(item[2] for item in items)
    emitted = tuple(item[3] for item in items)
    assert F.emit_without_stop(e, limits, emitted) is expected


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 40)), max_size=8),
       st.integers(1, 17))
def test_new_blocks_is_the_sum_of_blocks_for(intervals, size):
    facts = CapacityFacts(size)
    starts = tuple(start for start, _ in intervals)
    ends = tuple(start + width for start, width in intervals)
    for ends_now in (ends, tuple(start + 1 for start in starts)):  # mixed and one-row work
        columns = B.WorkColumns([], starts, ends_now,
                                tuple(b - a for a, b in zip(starts, ends_now, strict=True)), ())
        expected = sum(facts.blocks_for(b) - facts.blocks_for(a)
                       for a, b in zip(starts, ends_now, strict=True))
        assert blocks_opened_total(columns.starts, columns.ends, columns.widths, size) == expected
