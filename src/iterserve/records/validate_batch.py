"""The acceptance rules of a plan's work and a result's completions (0x01A).

A decision's plan holds about one work item per live request, most of them
decode rows, and validation checks every item twice (the plan before
execution, its completion after). These passes decide acceptance for all
items of a plan or a result at once: ``zip(*records)`` turns the items,
their views and their completions into columns in one C-level pass each,
and each rule is then a comparison of whole columns or one ``map`` over
them. They accept exactly the legal work and completions; when they refuse,
:mod:`iterserve.records.validate` finds the first item that breaks a rule
and raises that rule's named error. The row-by-row statement of the same
rules is the oracle in ``tests/oracles/validate_reference.py``: the tests
pin that the two agree on valid and corrupted plans and results.

Work items are :class:`WorkItem` and completions :class:`CompletedInterval`
(fixed-width records: a record of another width is refused). The frontier
rules come from :mod:`iterserve.records.frontier`: its batch forms for
decode rows, its per-item forms for every other interval.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import compress, repeat
from operator import and_, eq, getitem, is_, is_not, le, not_, sub
from typing import Any, NamedTuple

from iterserve.records.columns import field_columns
from iterserve.records.frontier import (
    DECODE,
    are_decode_rows,
    completion_service,
    emit_without_stop,
    interval_kind,
)
from iterserve.records.plan import WorkItem
from iterserve.records.result import CompletedInterval
from iterserve.records.view import Lifecycle, RequestView
from iterserve.records.view_map import views_or_none

_RUNNING = Lifecycle.RUNNING
_VIEW = RequestView._fields.index
_GENERATION, _SNAPSHOT, _READY, _LIFECYCLE = map(
    _VIEW, ("generation", "snapshot_version", "is_ready", "lifecycle"))
_PROMPT, _EMITTED, _COMPUTED, _MAX_OUTPUT, _CLIENT = map(
    _VIEW, ("num_prompt_tokens", "num_emitted", "num_computed", "max_output_tokens", "client_id"))
# the unpacking below names the records' fields in their declared order
assert WorkItem._fields == ("request_id", "generation", "snapshot_version", "start", "end",
                            "kind", "positions", "tie_break")
assert CompletedInterval._fields == ("request_id", "generation", "start", "end", "emitted",
                                     "token_id", "finish_reason")


class WorkColumns(NamedTuple):
    """A plan's work as columns, in plan order: each item's view, interval
    bounds and width (``end - start``) and recorded tie-break key."""

    views: list[RequestView]
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    widths: tuple[int, ...]
    tie_breaks: tuple[tuple[object, ...], ...]


_NO_WORK = WorkColumns([], (), (), (), ())


def work_columns(work: Sequence[WorkItem], views: Mapping[str, RequestView]) -> WorkColumns:
    """The columns of work whose every item names a view."""
    if not work:
        return _NO_WORK
    ids, _, _, starts, ends, _, _, tie_breaks = field_columns(work)
    return WorkColumns(list(map(views.__getitem__, ids)), starts, ends,
                       tuple(map(sub, ends, starts)), tie_breaks)


def accepted_work(work: Sequence[WorkItem], views: Mapping[str, RequestView],
                  admitted: set[str], leaving: set[str]) -> WorkColumns | None:
    """The work's columns when every item binds a current, ready, admitted
    view once and its only legal interval with its derived kind and
    positions; None when one breaks a rule (then ``validate`` names it)."""
    if not work:
        return _NO_WORK
    try:
        return _accepted_work(work, views, admitted, leaving)
    except (TypeError, ValueError):  # a missing view or a malformed record
        return None


def _accepted_work(work: Sequence[WorkItem], views: Mapping[str, RequestView],
                   admitted: set[str], leaving: set[str]) -> WorkColumns | None:
    ids, generations, snapshots, starts, ends, kinds, positions, tie_breaks = field_columns(work)
    item_views = views_or_none(views, ids)
    view_columns: list[tuple[Any, ...]] = list(zip(*item_views, strict=True))  # TypeError: a None
    computed = view_columns[_COMPUTED]
    num_items = len(ids)
    if not (
        generations == view_columns[_GENERATION]
        and snapshots == view_columns[_SNAPSHOT]
        and starts == computed
        and all(view_columns[_READY])
        and len(set(ids)) == num_items
        and leaving.isdisjoint(ids)
        and admitted.issuperset(compress(ids, map(is_not, view_columns[_LIFECYCLE],
                                                  repeat(_RUNNING))))
        and positions == tuple(map(range, starts, ends))
    ):
        return None
    prompts, emitted = view_columns[_PROMPT], view_columns[_EMITTED]
    widths = tuple(map(sub, ends, starts))
    is_decode = list(map(is_, kinds, repeat(DECODE)))
    if not all(is_decode):
        for i in compress(range(num_items), map(not_, is_decode)):
            if interval_kind(prompts[i], emitted[i], computed[i], starts[i],
                             ends[i]) is not kinds[i]:
                return None
        prompts, emitted, decode_ends, decode_widths = (
            tuple(compress(column, is_decode)) for column in (prompts, emitted, ends, widths))
    else:
        decode_ends, decode_widths = ends, widths
    if not are_decode_rows(prompts, emitted, decode_ends, decode_widths):
        return None
    return WorkColumns(item_views, starts, ends, widths, tie_breaks)  # type: ignore[arg-type]


def accepted_service(work: Sequence[WorkItem], completed: Sequence[CompletedInterval],
                     views: Mapping[str, RequestView]) -> Counter[str] | None:
    """Completed service rows per client when every completion answers open
    planned work once, in its generation, from the planned start to at most
    the planned end, and keeps the output clock; None when one breaks a
    rule (then ``validate`` names it). Any order, any subset of the work (a
    failed item completes nothing), a partial interval: each is legal. The
    decode rows that report no stop are checked in columns, the rest one by
    one through the frontier rules."""
    if not completed:
        return Counter()
    try:
        return _accepted_service(work, completed, views)
    except (KeyError, TypeError, ValueError):  # no planned work, a missing view, a bad record
        return None


def _accepted_service(work: Sequence[WorkItem], completed: Sequence[CompletedInterval],
                      views: Mapping[str, RequestView]) -> Counter[str] | None:
    (ids, generations, starts, ends, emitted, _, finishes) = field_columns(completed)
    num_items = len(ids)
    if len(set(ids)) != num_items:
        return None
    columns = field_columns(work)
    if columns[0] != ids:  # not every item in plan order: each completion's own item
        planned = dict(zip(columns[0], work, strict=True))
        columns = field_columns(list(map(planned.__getitem__, ids)))  # KeyError: unplanned
    _, planned_generations, _, planned_starts, planned_ends, kinds, _, _ = columns
    widths = tuple(map(sub, ends, starts))
    if not (
        generations == planned_generations
        and starts == planned_starts
        and (ends == planned_ends or all(map(le, ends, planned_ends)))
        and (widths.count(1) == num_items or min(widths) > 0)  # start < end
    ):
        return None
    item_views: list[Any] = views_or_none(views, ids)
    outputs, limits, clients = (  # TypeError on a missing view
        tuple(map(getitem, item_views, repeat(field)))
        for field in (_EMITTED, _MAX_OUTPUT, _CLIENT))
    # one-row decode intervals that report no finish reason: one service row
    # each, in columns; the other completions one by one
    plain = list(map(is_, kinds, repeat(DECODE)))
    if not (all(plain) and finishes.count(None) == num_items  # count: == None, stricter
            and widths.count(1) == num_items):
        plain = list(map(and_, map(and_, plain, map(is_, finishes, repeat(None))),
                         map(eq, widths, repeat(1))))
        plain_outputs, plain_limits, plain_emitted, plain_clients = (
            tuple(compress(column, plain)) for column in (outputs, limits, emitted, clients))
    else:
        plain_outputs, plain_limits, plain_emitted, plain_clients = (
            outputs, limits, emitted, clients)
    if not emit_without_stop(plain_outputs, plain_limits, plain_emitted):
        return None
    service = Counter(plain_clients)
    if len(plain_clients) == num_items:
        return service
    for i in compress(range(num_items), map(not_, plain)):
        view = item_views[i]
        rows = completion_service(view[_PROMPT], outputs[i], limits[i], kinds[i], starts[i],
                                  ends[i], emitted[i], finishes[i] is not None)
        if rows is None:
            return None
        if rows:
            service[clients[i]] += rows
    return service
