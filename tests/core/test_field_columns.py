"""Records that transpose into field columns once (issue 15): a plan's
:class:`Work` and a result's :class:`Completed` are the plain tuples they
hold (equal, same hash, pickled and copied as such), their columns are the
transposition of their items, and the readers of columns give what the
item-by-item forms give."""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iterserve.engine.result_builder import ResultBuilder
from iterserve.records.columns import FieldColumns, field_columns
from iterserve.records.plan import IterationPlan, Work, make_work, rows_by_kind, work_kind_span
from iterserve.records.result import Completed, CompletedInterval
from iterserve.records.state import SchedulerState
from iterserve.records.view import FinishReason, Lifecycle, RequestView, WorkKind

ITEMS = (make_work("a", 0, 1, 0, 4, WorkKind.PREFILL_CHUNK, (0, "a")),
         make_work("b", 1, 2, 7, 8, WorkKind.DECODE_ROW, (1, "b")))


def test_work_is_the_tuple_it_holds() -> None:
    work = Work(ITEMS)
    assert work == ITEMS and hash(work) == hash(ITEMS) and repr(work) == repr(ITEMS)
    assert work.columns == tuple(zip(*ITEMS, strict=True))
    assert work.columns is work.columns  # transposed once
    for copied in (pickle.loads(pickle.dumps(work)), copy.copy(work), copy.deepcopy(work)):
        assert copied == ITEMS and type(copied) is Work
        assert "_columns" not in copied.__dict__  # the kept columns are not carried along
    assert len(pickle.dumps(work)) < len(pickle.dumps((work, work.columns)))


def test_kept_columns_are_handed_over_and_plain_tuples_are_transposed() -> None:
    columns = tuple(zip(*ITEMS, strict=True))
    work = Work.with_columns(iter(ITEMS), columns)
    assert work == ITEMS and field_columns(work) is columns
    assert field_columns(ITEMS) == columns and field_columns(list(ITEMS)) == columns
    assert field_columns(()) == () and field_columns(Work()) == ()
    with pytest.raises(ValueError):
        field_columns(((1, 2), (3,)))
    with pytest.raises(ValueError):
        FieldColumns(((1, 2), (3,))).columns  # noqa: B018 (the property raises)


KINDS = st.sampled_from(list(WorkKind))
ROWS = st.lists(st.tuples(KINDS, st.integers(0, 9), st.integers(1, 4)), max_size=8)


@settings(max_examples=200, deadline=None)
@given(rows=ROWS, as_work=st.booleans())
def test_rows_by_kind_from_columns_equals_the_item_sums(rows, as_work) -> None:
    items = tuple(make_work(f"r{i}", 0, 1, start, start + width, kind)
                  for i, (kind, start, width) in enumerate(rows))
    expected = dict.fromkeys(WorkKind, 0)
    for kind, start, end in map(work_kind_span, items):
        expected[kind] += end - start
    work = Work(items) if as_work else items
    assert rows_by_kind(work) == (expected[WorkKind.PREFILL_CHUNK],
                                  expected[WorkKind.DECODE_ROW], expected[WorkKind.REBUILD])


def test_a_built_result_keeps_the_columns_of_its_completions() -> None:
    """One ``complete_rows`` call hands its columns to the result; more calls
    (the executor's row-by-row path) leave the result to transpose its own."""
    views = {rid: RequestView(rid, 0, 1, "a", 0, 0.0, 0, 3, 8, num_emitted=e, num_computed=2 + e,
                              num_committed=2 + e, lifecycle=Lifecycle.RUNNING)
             for rid, e in (("r1", 1), ("r2", 2), ("r3", 3), ("r4", 4))}
    work = tuple(make_work(rid, 0, 1, view.num_computed, view.num_computed + 1,
                           WorkKind.DECODE_ROW) for rid, view in views.items())
    state = SchedulerState(2, 5, 2.0, (), tuple(views), (), (), views, 100, 8)
    plan = IterationPlan(2, 5, "test", "1", Work(work), 4, 4)
    whole = ResultBuilder(plan, state, None)
    whole.complete_rows(work, list(views.values()), [41] * 4, [None] * 4)
    by_row = ResultBuilder(plan, state, None)
    for item in work:
        by_row.complete(item, views[item.request_id], 41, FinishReason.STOP)
    for builder, kept in ((whole, True), (by_row, False)):
        completed = builder.build(1.0).completed
        assert type(completed) is Completed and len(completed) == 4
        assert ("_columns" in completed.__dict__) is kept
        assert completed.columns == tuple(zip(*completed, strict=True))
        assert all(type(item) is CompletedInterval for item in completed)
