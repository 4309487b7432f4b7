"""The frontier rules pinned directly (0x01A legal intervals, 0x0C rebuild).

The unit cases state the rule on the spec's own numbers; the Hypothesis
properties tie :mod:`iterserve.records.frontier` to the validators: for any
reachable (p, e, c) and row limit, the interval the frontier gives is one
``validate_plan`` accepts, every interval it accepts is one the frontier
could give, and every other interval is refused with its named error.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iterserve.records import errors as E
from iterserve.records import frontier as F
from iterserve.records.plan import IterationPlan, WorkItem
from iterserve.records.result import CompletedInterval, IterationResult
from iterserve.records.spec import Capacity, OnlineWorkload
from iterserve.records.state import SchedulerState
from iterserve.records.validate import validate_plan, validate_result
from iterserve.records.view import FinishReason, Lifecycle, RequestView, WorkKind, derive_kind

PREFILL, DECODE, REBUILD = WorkKind.PREFILL_CHUNK, WorkKind.DECODE_ROW, WorkKind.REBUILD
WORKLOAD = OnlineWorkload("frontier", "iteration", Capacity(10_000, 8), ())


def test_prefill_is_c_to_at_most_p_and_emits_only_at_p() -> None:
    assert F.target(8, 0) == 8
    assert F.next_interval(8, 0, 3, 100) == (5, PREFILL)
    assert F.next_interval(8, 0, 3, 2) == (2, PREFILL)
    assert F.interval_kind(8, 0, 3, 3, 8) is PREFILL
    assert F.interval_kind(8, 0, 3, 3, 9) is None
    assert F.emits(PREFILL, 8, 8) and not F.emits(PREFILL, 8, 7)


def test_decode_is_exactly_one_row_at_p_plus_e_minus_1() -> None:
    assert F.target(8, 3) == 10
    assert F.next_interval(8, 3, 10, 100) == (1, DECODE)
    assert F.legal_rows(8, 3, 10) == 1
    assert F.interval_kind(8, 3, 10, 10, 11) is DECODE
    assert F.interval_kind(8, 3, 10, 10, 12) is None
    assert F.emits(DECODE, 8, 11)


def test_rebuild_runs_to_the_target_emits_nothing_and_earns_nothing() -> None:
    # 0x0C: after a recompute preemption c = 0 with e = 2: rebuild [0, p + e - 1)
    assert F.next_interval(3, 2, 0, 100) == (4, REBUILD)
    assert F.interval_kind(3, 2, 0, 0, 5) is None, "rebuild may not run past p + e - 1"
    assert not F.emits(REBUILD, 3, 4)
    assert F.service_rows(REBUILD, 0, 4) == 0 and not F.earns_service(REBUILD)
    assert F.service_rows(PREFILL, 0, 4) == 4 and F.service_rows(DECODE, 4, 5) == 1


def test_length_stop_phase_rank_and_no_interval_cases() -> None:
    assert F.is_length_stop(4, 4) and not F.is_length_stop(3, 4)
    assert [F.phase_rank(8, 3, 10), F.phase_rank(3, 2, 0), F.phase_rank(8, 0, 0)] == [0, 1, 2]
    assert F.next_interval(8, 3, 10, 0) == (0, None)  # no room: nothing, not a zero-row item
    assert F.next_interval(8, 0, 8, 100) == (0, None)  # unreachable: prefill done, nothing emitted
    assert F.rows_through_next_emission(8, 0) == 8 and F.rows_through_next_emission(8, 3) == 11


@st.composite
def frontiers(draw: st.DrawFn) -> tuple[int, int, int]:
    """A reachable (p, e, c): c < p before the first output, c <= p + e - 1 after."""
    p = draw(st.integers(1, 40))
    e = draw(st.integers(0, 6))
    c = draw(st.integers(0, p - 1 if e == 0 else p + e - 1))
    return p, e, c


def _state(p: int, e: int, c: int, max_output_tokens: int = 1_000) -> SchedulerState:
    view = RequestView("r", 0, 7, "client", 0, 0.0, 0, p, max_output_tokens, num_emitted=e,
                       num_computed=c, num_committed=c, lifecycle=Lifecycle.RUNNING)
    return SchedulerState(3, 9, 3.0, (), ("r",), (), (), {"r": view}, 10_000, 8)


def _plan(state: SchedulerState, start: int, end: int, kind: WorkKind) -> IterationPlan:
    work = WorkItem("r", 0, 7, start, end, kind, range(start, end))
    return IterationPlan(state.decision_id, state.state_version, "test", "1", (work,),
                         max(end - start, 0), 1)


def _expected_error(p: int, e: int, c: int, start: int, end: int,
                    kind: WorkKind) -> type[E.ContractViolation] | None:
    """The spec's rule written out once more, as the oracle (0x01A)."""
    t = p if e == 0 else p + e - 1
    decoding = e > 0 and c == t
    if start != c:
        return E.IntervalBeforeFrontier
    if end <= start:
        return E.EmptyInterval
    if decoding and end != c + 1:
        return E.MultiRowDecode
    if not decoding and end > t:
        return E.IntervalBeyondTarget
    derived = DECODE if decoding else PREFILL if e == 0 else REBUILD
    return None if kind is derived else E.ForgedKind


@settings(max_examples=300, deadline=None)
@given(frontiers(), st.integers(0, 50))
def test_the_frontiers_interval_is_accepted(pec: tuple[int, int, int], max_rows: int) -> None:
    p, e, c = pec
    rows, kind = F.next_interval(p, e, c, max_rows)
    if max_rows == 0:
        assert (rows, kind) == (0, None)
        return
    assert kind is not None and 1 <= rows <= max_rows
    assert rows == min(F.legal_rows(p, e, c), max_rows)
    validate_plan(WORKLOAD, _state(p, e, c), _plan(_state(p, e, c), c, c + rows, kind))


@st.composite
def intervals(draw: st.DrawFn) -> tuple[tuple[int, int, int], int, int, WorkKind]:
    """A reachable frontier and an interval near it: mostly starting at c,
    ending anywhere from before c to past the target."""
    p, e, c = draw(frontiers())
    start = c + draw(st.sampled_from([0, 0, 0, -1, 1, 2])) if c else draw(st.integers(0, 2))
    end = start + draw(st.integers(-1, F.target(p, e) - c + 2))
    return (p, e, c), start, end, draw(st.sampled_from(list(WorkKind)))


@settings(max_examples=500, deadline=None)
@given(intervals())
def test_every_other_interval_is_refused_with_its_named_error(
    case: tuple[tuple[int, int, int], int, int, WorkKind],
) -> None:
    pec, start, end, kind = case
    p, e, c = pec
    state = _state(p, e, c)
    expected = _expected_error(p, e, c, start, end, kind)
    frontier_gives = start == c and end > start and F.next_interval(p, e, c, end - start) == (
        end - start, kind)
    assert (expected is None) == frontier_gives
    assert (F.interval_kind(p, e, c, start, end) is kind) == frontier_gives
    view = state.views["r"]
    assert (derive_kind(view, start, end) is kind) == frontier_gives
    if expected is None:
        validate_plan(WORKLOAD, state, _plan(state, start, end, kind))
    else:
        with pytest.raises(expected):
            validate_plan(WORKLOAD, state, _plan(state, start, end, kind))
        with pytest.raises(expected):
            F.check_interval("r", p, e, c, start, end, kind)


@settings(max_examples=400, deadline=None)
@given(frontiers(), st.integers(1, 50), st.integers(1, 8), st.booleans(),
       st.sampled_from([None, FinishReason.STOP, FinishReason.LENGTH]))
def test_completions_emit_stop_and_earn_service_by_the_frontier(
    pec: tuple[int, int, int], max_rows: int, max_output_tokens: int, emitted: bool,
    finish: FinishReason | None,
) -> None:
    p, e, c = pec
    if e >= max_output_tokens:
        max_output_tokens = e + 1  # a live request has not reached its limit yet
    state = _state(p, e, c, max_output_tokens)
    rows, kind = F.next_interval(p, e, c, max_rows)
    assert kind is not None
    plan = _plan(state, c, c + rows, kind)
    end = c + rows
    should_emit = kind is DECODE or (kind is PREFILL and end == p)  # the spec, as the oracle
    length_reached = e + 1 >= max_output_tokens
    legal = emitted == should_emit and (finish is None or emitted) and not (
        emitted and finish is None and length_reached)
    service = {"client": rows} if kind is not REBUILD else {}
    result = IterationResult(3, 9, (CompletedInterval("r", 0, c, end, emitted, None, finish),),
                             service=service)
    earned = F.completion_service(p, e, max_output_tokens, kind, c, end, emitted,
                                  finish is not None)
    assert earned == (sum(service.values()) if legal else None)
    if legal:
        validate_result(plan, state, result)
    else:
        with pytest.raises(E.WrongOutputClock):
            validate_result(plan, state, result)


def test_the_derived_helpers_agree_with_the_spec_numbers() -> None:
    # p = 8: decode at c = 10 after 3 outputs; rebuild below it; prefill before output 1
    assert F.decode_steps([8, 8, 8], [3, 3, 0], [10, 9, 7]) == [True, False, False]
    assert [F.num_decode_rows_done(e) for e in (0, 1, 2, 5)] == [0, 0, 1, 4]
    assert F.rows_held_after_outputs(8, 1) == 8 and F.rows_held_after_outputs(8, 4) == 11
    assert F.rows_of_sequence_left(8, 3, 4) == 7 and F.rows_of_sequence_left(8, 0, 8) == 0
    assert F.interval_emits(8, 0, 3, 8) and not F.interval_emits(8, 0, 3, 7)
    assert F.interval_emits(8, 3, 10, 11) and not F.interval_emits(8, 3, 0, 10)
    assert F.interval_earns_service(8, 0, 3) and F.interval_earns_service(8, 3, 10)
    assert not F.interval_earns_service(8, 3, 0)
    assert list(F.plain_decode_tokens([0, 2, 2, 2], [True, True, False, True],
                                      [None, None, None, FinishReason.LENGTH])) == [
        False, True, False, False]


@settings(max_examples=200, deadline=None)
@given(frontiers())
def test_the_derived_helpers_agree_with_next_kind(pec: tuple[int, int, int]) -> None:
    p, e, c = pec
    kind = F.next_kind(p, e, c)
    assert F.decode_steps([p], [e], [c]) == [kind is DECODE]
    rows, _ = F.next_interval(p, e, c, 10_000)
    if rows:
        assert F.interval_emits(p, e, c, c + rows) is F.emits(kind, p, c + rows)
        assert F.interval_earns_service(p, e, c) is (kind is not REBUILD)


@settings(max_examples=100, deadline=None)
@given(st.lists(frontiers(), max_size=12), st.integers(1, 17))
def test_the_column_forms_agree_with_the_row_forms(pecs: list[tuple[int, int, int]],
                                                   size: int) -> None:
    from iterserve.records.kv_abi import blocks_opened, opens_block

    ps, es, cs = ([pec[i] for pec in pecs] for i in range(3))
    assert F.decode_steps(ps, es, cs) == [F.next_kind(*pec) is DECODE for pec in pecs]
    assert opens_block(cs, size) == [blocks_opened(c, 1, size) == 1 for c in cs]
