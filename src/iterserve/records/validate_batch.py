"""Batch accept passes of plan and result validation (0x01A).

A decision's plan holds about one work item per live request, most of them
decode rows, and validation checks every item twice (the plan before
execution, its completion after). These passes check all items of a plan
or a result at once: ``zip(*records)`` turns the items, their views and
their completions into columns in one C-level pass each, and each rule is
then a comparison of whole columns or one ``map`` over them. They only
*accept*: on any doubt they return None and
:mod:`iterserve.records.validate` runs its row-by-row checks, which raise
the named error of the first broken invariant (or accept the rare legal
shape left to them, such as a partial completion). So a pass may refuse
more than the row-by-row checks, never less; the tests pin that the two
agree on valid and corrupted plans and results.

Work items are :class:`WorkItem` and completions :class:`CompletedInterval`
(fixed-width records: a record of another width is refused). The frontier
rules come from :mod:`iterserve.records.frontier`: its batch forms for
decode rows, its per-item forms for every other interval.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import compress, repeat
from operator import and_, getitem, is_, is_not, not_, sub
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
    positions; None on any doubt. The rules of ``validate._validate_work``'s
    loop, in columns."""
    if not work:
        return _NO_WORK
    try:
        return _accepted_work(work, views, admitted, leaving)
    except (TypeError, ValueError):  # a missing view or a malformed record
        return None


def _accepted_work(work: Sequence[WorkItem], views: Mapping[str, RequestView],
                   admitted: set[str], leaving: set[str]) -> WorkColumns | None:
    ids, generations, snapshots, starts, ends, kinds, positions, tie_breaks = field_columns(work)
    item_views = list(map(views.get, ids))
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
    """Completed service rows per client when ``completed`` answers every
    item of ``work`` in plan order (its request, generation and whole
    interval) and each completion keeps the output clock; None on any
    doubt. The rules of ``validate._completion_service``'s loop, in columns:
    the decode rows that report no stop at once, the rest one by one."""
    if len(completed) != len(work):
        return None
    if not work:
        return Counter()
    try:
        return _accepted_service(work, completed, views)
    except (TypeError, ValueError):  # a missing view or a malformed record
        return None


def _accepted_service(work: Sequence[WorkItem], completed: Sequence[CompletedInterval],
                      views: Mapping[str, RequestView]) -> Counter[str] | None:
    ids, generations, _, starts, ends, kinds, _, _ = field_columns(work)
    (completed_ids, completed_generations, completed_starts, completed_ends, emitted, _,
     finishes) = field_columns(completed)
    num_items = len(ids)
    widths = tuple(map(sub, ends, starts))
    if not (
        completed_ids == ids
        and completed_generations == generations
        and completed_starts == starts
        and completed_ends == ends
        and len(set(ids)) == num_items  # the planned map holds one item per id
        and (widths.count(1) == num_items or min(widths) > 0)  # start < end
    ):
        return None
    item_views: list[Any] = list(map(views.get, ids))
    outputs, limits, clients = (  # TypeError on a missing view
        tuple(map(getitem, item_views, repeat(field)))
        for field in (_EMITTED, _MAX_OUTPUT, _CLIENT))
    # decode rows that report no finish reason: one service row each, in columns
    plain = list(map(is_, kinds, repeat(DECODE)))
    if not (all(plain) and finishes.count(None) == num_items):  # count: == None, stricter
        plain = list(map(and_, plain, map(is_, finishes, repeat(None))))
        plain_outputs, plain_limits, plain_emitted, plain_widths, plain_clients = (
            tuple(compress(column, plain))
            for column in (outputs, limits, emitted, widths, clients))
    else:
        plain_outputs, plain_limits, plain_emitted, plain_widths, plain_clients = (
            outputs, limits, emitted, widths, clients)
    if not (emit_without_stop(plain_outputs, plain_limits, plain_emitted)
            and plain_widths.count(1) == len(plain_widths)):
        return None
    service = Counter(plain_clients)
    if len(plain_widths) == num_items:
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
