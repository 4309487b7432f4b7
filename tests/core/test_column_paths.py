"""The column-at-a-time paths equal the per-row rules they batch: the
frontier's row helpers against :func:`emits` / :func:`earns_service` /
:func:`is_length_stop`, the transition's ``_complete_rows`` against
``_complete``, and ``ResultBuilder.complete_rows`` against one
``complete`` call per row (service order across clients included)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from iterserve.engine.result_builder import ResultBuilder
from iterserve.records import frontier as F
from iterserve.records.plan import IterationPlan, WorkItem
from iterserve.records.result import CompletedInterval
from iterserve.records.state import SchedulerState
from iterserve.records.transition import _complete, _complete_rows
from iterserve.records.view import FinishReason, Lifecycle, RequestView, WorkKind

KINDS = st.sampled_from(list(WorkKind))
REASONS = st.sampled_from([None, FinishReason.STOP, FinishReason.LENGTH])


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(KINDS, st.integers(1, 6), st.integers(1, 6), st.integers(0, 6)),
                     max_size=8))
def test_row_helpers_equal_the_scalar_rules(rows):
    kinds = [kind for kind, _, _, _ in rows]
    ps = [p for _, p, _, _ in rows]
    ends = [end for _, _, end, _ in rows]
    nums = [num for _, _, _, num in rows]
    assert F.emits_rows(kinds, ps, ends) == [F.emits(*row[:3]) for row in rows]
    assert F.earns_service_rows(kinds) == [F.earns_service(kind) for kind in kinds]
    assert F.length_stop_rows(nums, ps) == [F.is_length_stop(n, p) for n, p in zip(nums, ps, strict=True)]
    assert F.all_decode_kinds(kinds) == all(kind is WorkKind.DECODE_ROW for kind in kinds)


def _view(index: int, client: str, p: int, e: int, c: int, first: float | None,
          max_out: int) -> RequestView:
    return RequestView(f"r{index}", 0, 3, client, 0, 0.0, index, p, max_out, num_emitted=e,
                       num_computed=c, num_committed=c, lifecycle=Lifecycle.RUNNING,
                       first_token_time=first, last_output_time=first)


VIEWS = st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 6), st.integers(0, 4),
                           st.sampled_from([None, 0.0, 1.5]), st.integers(1, 6), KINDS,
                           st.integers(0, 3), REASONS, st.booleans()),
                 min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(rows=VIEWS, now=st.sampled_from([0.0, 2.5]))
def test_complete_rows_equals_complete_per_row(rows, now):
    views = {}
    items = []
    for index, (client, p, e, first, max_out, _, width, reason, emitted) in enumerate(rows):
        view = _view(index, client, p, e, p + e - 1 if e else 0, first, max_out)
        views[view.request_id] = view
        items.append(CompletedInterval(view.request_id, 0, view.num_computed,
                                       view.num_computed + width, emitted,
                                       7 if emitted else None, reason if emitted else None))
    expected_views = dict(views)
    expected = [_complete(expected_views[i.request_id], i, now) for i in items]
    for view in expected:
        expected_views[view.request_id] = view
    got_views = dict(views)
    got, finished, once = _complete_rows(got_views, items, now)
    assert got == expected and got_views == expected_views and once
    assert all(type(v) is RequestView for v in got)
    assert finished == [v.request_id for v in expected if v.lifecycle is Lifecycle.FINISHED]


def test_a_request_completed_twice_is_told_apart():
    """Validation refuses it; unvalidated, the rows bound must not assume
    one emission per request (``advance`` reads ``once``)."""
    view = _view(0, "c", 4, 1, 4, 1.0, 9)
    first = CompletedInterval(view.request_id, 0, 4, 5, True, 7, None)
    second = CompletedInterval(view.request_id, 0, 5, 6, True, 8, None)
    views = {view.request_id: view}
    got, _, once = _complete_rows(views, [first, second], 2.0)
    assert not once and views["r0"].num_emitted == 3 and got[-1] is views["r0"]


@settings(max_examples=200, deadline=None)
@given(rows=VIEWS, length_first=st.booleans())
def test_builder_complete_rows_equals_complete_per_row(rows, length_first):
    views, works, tokens, stops = {}, [], [], []
    for index, (client, p, e, first, max_out, kind, width, reason, _) in enumerate(rows):
        view = _view(index, client, p, e, 0, first, max_out)
        views[view.request_id] = view
        width = 1 if kind is WorkKind.DECODE_ROW and index % 2 else width  # legal and not
        works.append(WorkItem(view.request_id, 0, 3, 0, width, kind, range(width)))
        tokens.append(40 + index)
        stops.append(reason)
    state = SchedulerState(0, 0, 0.0, (), tuple(views), (), (), views, 100, 8)
    plan = IterationPlan(0, 0, "test", "1", tuple(works), 100, 8)
    batch = ResultBuilder(plan, state, None, length_first=length_first)
    batch.complete_rows(works, list(views.values()), tokens, stops)
    single = ResultBuilder(plan, state, None, length_first=length_first)
    for work, view, token, stop in zip(works, views.values(), tokens, stops, strict=True):
        single.complete(work, view, token, stop)
    got, one_by_one = batch.build(1.0), single.build(1.0)
    completed, service, finished = _reference(works, list(views.values()), tokens, stops,
                                              length_first)
    for result, builder in ((got, batch), (one_by_one, single)):
        assert list(result.completed) == completed and builder.finished == finished
        assert list(result.service.items()) == list(service.items())  # the same order
        assert all(type(c) is CompletedInterval for c in result.completed)


def _reference(works, views, tokens, stops, length_first):  # noqa: ANN001, ANN202
    """The per-row loop the column path replaced, written out from the
    frontier's scalar rules."""
    completed, service, finished = [], {}, []
    for work, view, token, reason in zip(works, views, tokens, stops, strict=True):
        if F.earns_service(work.kind):
            service[view.client_id] = service.get(view.client_id, 0) + work.end - work.start
        if not F.emits(work.kind, view.num_prompt_tokens, work.end):
            completed.append(CompletedInterval(work.request_id, work.generation, work.start,
                                               work.end, False))
            continue
        if (reason is None or length_first) and F.is_length_stop(view.num_emitted + 1,
                                                                 view.max_output_tokens):
            reason = FinishReason.LENGTH
        if reason is not None:
            finished.append(work.request_id)
        completed.append(CompletedInterval(work.request_id, work.generation, work.start,
                                           work.end, True, token, reason))
    return completed, service, finished
