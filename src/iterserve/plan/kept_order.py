"""A policy's order of the waiting queue, kept from the changes between decisions.

A policy that ranks the whole waiting queue by a key re-read every waiting
view per decision: O(n log n) per decision and quadratic over an overloaded
run (DESIGN rule 8). A :class:`KeptOrder` holds the ready waiting requests
sorted by a key that is a function of the view alone (and of a ``context``
the run fixes: its clock scale, budgets, block size), and follows the
policy's successive states: the ids whose view changed
(:func:`~iterserve.records.view_delta.changes_since`) and the ids that left
or entered the waiting queue
(:func:`~iterserve.records.id_queue.queue_changes`) are re-keyed, in
O(changes * log n). Where those say nothing (a state built without view
deltas, a state of another run, a reader too far behind, a changed
context) it re-reads every waiting view: the order is the same, the cost
is the full sort's.

The order is exactly ``sorted(ready waiting views, key=key_of)``: keys must
be distinct between requests (every key a policy keeps ends in the request
id and generation), so no tie is left to the queue's position. Keys that
change with ``now`` are not kept here: a policy finds a key of the view
whose order is the same at every ``now`` (see ``least-slack``,
``priority-aging``, ``mlfq``).

For the ranked pass (:func:`iterserve.plan.passes.schedule_ranked`) the
order also knows the fewest rows any kept request's next interval takes and
whether every kept request starts on a block boundary: then when the KV
ledger cannot hold the first interval of the cheapest one, no waiting
request can be admitted (:meth:`KeptOrder.admits_none`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from itertools import takewhile
from operator import itemgetter
from typing import Any, NamedTuple

from sortedcontainers import SortedList

from iterserve.records import frontier
from iterserve.records.id_queue import Queue, queue_changes
from iterserve.records.kv_abi import blocks_opened
from iterserve.records.state import SchedulerState
from iterserve.records.view import RequestView
from iterserve.records.view_delta import changes_since

Key = tuple[Any, ...]
_ID = itemgetter(1)  # an element's request id
KeyOf = Callable[[RequestView], Key]


class KeptOrder:
    """The ready waiting requests of the state last synced, in key order.

    One instance per policy and per key; :meth:`sync` before each read.
    Elements are ``(key, request_id, rows)`` (``rows``: see
    :meth:`elements`); the views are read from the state."""

    __slots__ = ("_views", "_waiting", "_context", "_members", "_entries", "_sorted", "_rows",
                 "_num_unaligned", "_ready_only", "_rows_by_head", "_index_rows",
                 "num_rebuilds", "num_rekeyed")

    def __init__(self, *, ready_only: bool = True, index_rows: bool = False) -> None:
        """``ready_only`` False: every waiting request is kept, ready or not
        (for a pass in which a request that is not ready stops the pass).
        ``index_rows``: also keep each first key field's requests by their
        first interval's rows (for :meth:`first_fitting`)."""
        self._ready_only = ready_only
        self._index_rows = index_rows
        self._forget()
        self.num_rebuilds = 0  # full re-reads (for tests and benchmarks)
        self.num_rekeyed = 0  # views keyed one by one

    def _forget(self) -> None:
        self._views: Mapping[str, RequestView] | None = None
        self._waiting: Queue = ()
        self._context: object = None
        self._members: set[str] = set()  # every waiting id, ready or not
        self._entries: dict[str, tuple[Key, int | None]] = {}  # ready ids: key, rows (None: off-block)
        self._sorted = SortedList()  # (key, request_id)
        self._rows = SortedList()  # first-interval rows of the block-aligned entries
        self._num_unaligned = 0
        # per first key field: (rows, second key field, id), rows -1 when off-block
        self._rows_by_head: dict[Any, SortedList] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        # a copied policy starts without the memo
        return (_fresh, (self._ready_only, self._index_rows))

    # --- following the states ----------------------------------------------------------

    def sync(self, state: SchedulerState, key_of: KeyOf, context: object = None) -> None:
        """Make this order ``state``'s: its ready waiting views by ``key_of``,
        which must depend on the view and ``context`` only (a context unequal
        to the last one re-reads every view)."""
        context = (context, state.capacity.block_size)
        found = None
        if context == self._context and self._views is not None:
            found = changes_since(self._views, state.views, state.view_delta)
        if found is None:
            self._rebuild(state, key_of, context)
            return
        touched, gone = found
        left, entered = self._queue_edits(state.waiting)
        members, entries, views = self._members, self._entries, state.views
        block_size = state.capacity.block_size
        for rid in left:
            members.discard(rid)
            self._drop(rid)
        for rid in gone:
            self._drop(rid)
        members.update(entered)
        for rid in (*entered, *touched) if entered else touched:
            if rid in members:
                self._drop(rid)
                self._add(rid, views[rid], key_of, block_size)
            elif rid in entries:  # not waiting any more (a queue edit listed it)
                self._drop(rid)
        self._views, self._waiting = state.views, state.waiting

    def _queue_edits(self, waiting: Queue) -> tuple[list[str], list[str]]:
        changes = queue_changes(self._waiting, waiting)
        if changes is None:
            now = set(waiting)  # queues of two lineages: compare as sets (C speed)
            return list(self._members - now), list(now - self._members)
        left, front, back = changes
        if not front:
            return left, back
        # a changed front lists every old front id as left and every new one as
        # entered: those in both stayed (one whose view changed is re-keyed as
        # touched), and the front of preempted requests can be long
        stayed = set(left).intersection(front)
        if not stayed:
            return left, [*front, *back]
        return ([rid for rid in left if rid not in stayed],
                [rid for rid in (*front, *back) if rid not in stayed])

    def _rebuild(self, state: SchedulerState, key_of: KeyOf, context: object) -> None:
        self._forget()
        self.num_rebuilds += 1
        views, block_size = state.views, state.capacity.block_size
        self._members = set(state.waiting)
        for rid in state.waiting:
            self._add(rid, views[rid], key_of, block_size)
        self._views, self._waiting, self._context = views, state.waiting, context

    def _add(self, rid: str, view: RequestView, key_of: KeyOf, block_size: int | None) -> None:
        if self._ready_only and not view.is_ready:
            return
        self.num_rekeyed += 1
        key = key_of(view)
        aligned = block_size is None or view.num_computed % block_size == 0
        rows = frontier.legal_rows(view.num_prompt_tokens, view.num_emitted,
                                   view.num_computed) if aligned else None
        self._entries[rid] = (key, rows)
        self._sorted.add((key, rid, rows))
        if rows is None:
            self._num_unaligned += 1
        else:
            self._rows.add(rows)
        if self._index_rows:
            index = self._rows_by_head.get(key[0])
            if index is None:
                index = self._rows_by_head[key[0]] = SortedList()
            index.add((-1 if rows is None else rows, key[1], rid))

    def _drop(self, rid: str) -> None:
        entry = self._entries.pop(rid, None)
        if entry is None:
            return
        key, rows = entry
        self._sorted.remove((key, rid, rows))
        if rows is None:
            self._num_unaligned -= 1
        else:
            self._rows.remove(rows)
        if self._index_rows:
            index = self._rows_by_head[key[0]]
            index.remove((-1 if rows is None else rows, key[1], rid))
            if not index:
                del self._rows_by_head[key[0]]

    # --- reading ------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._sorted)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._entries

    def key(self, request_id: str) -> Key:
        return self._entries[request_id][0]

    def bisect(self, key: Key) -> int:
        """How many kept requests rank before ``key`` (an equal key ranks after)."""
        return int(self._sorted.bisect_left((key,)))

    def ids(self, start: int = 0, stop: int | None = None) -> Iterator[str]:
        """The kept ids at positions ``[start, stop)``, in order."""
        return map(_ID, self._sorted.islice(start, stop))

    def count_while(self, holds: Callable[[Key], bool]) -> int:
        """How many keys from the first hold ``holds``, a predicate true on a
        prefix of the order (binary search: O(log^2 n))."""
        ordered = self._sorted
        low, high = 0, len(ordered)
        while low < high:
            middle = (low + high) // 2
            if holds(ordered[middle][0]):
                low = middle + 1
            else:
                high = middle
        return low

    def heads(self) -> Iterator[Any]:
        """The distinct first key fields, in order (each found by one
        bisection; the second key field must be a number)."""
        ordered = self._sorted
        index = 0
        while index < len(ordered):
            head = ordered[index][0][0]
            yield head
            index = ordered.bisect_left(((head, math.inf),))

    def group(self, head: object, after: object = None) -> Iterator[tuple[Any, ...]]:
        """``(key, request_id, ...)`` of the kept requests whose key starts
        with ``head`` (and, given ``after``, whose second key field is at
        least ``after``: found by one bisection)."""
        start = (head,) if after is None else (head, after)
        return takewhile(lambda element: element[0][0] == head,
                         self._sorted.irange((start,)))

    def first_fitting(self, head: object, start: Any, stop: Any, limit: float) -> Any:
        """The least second key field in ``[start, stop)`` of the requests
        whose key starts with ``head`` and whose first interval takes at
        most ``limit`` rows or starts off a block boundary (those are
        tried, not ruled out); None when there is none. Needs
        ``index_rows``. Reads the window in key order or the requests
        within ``limit``, whichever holds fewer (each counted by bisection)."""
        index = self._rows_by_head.get(head)
        if index is None:
            return None
        num_within = index.bisect_right((limit, math.inf))
        ordered = self._sorted
        low, high = ordered.bisect_left(((head, start),)), ordered.bisect_left(((head, stop),))
        if high - low <= num_within:
            return next((key[1] for key, _, rows in ordered.islice(low, high)
                         if rows is None or rows <= limit), None)
        within = (second for _, second, _ in index.islice(0, num_within)
                  if start <= second < stop)
        return min(within, default=None)

    def views(self, state: SchedulerState) -> Iterator[RequestView]:
        """The kept views in order (lazily: a pass that stops early reads few)."""
        views = state.views
        return map(views.__getitem__, map(_ID, self._sorted))

    def elements(self, start: int, stop: int) -> Iterator[tuple[Key, str, int | None]]:
        """``(key, request_id, rows)`` at positions ``[start, stop)``: ``rows``
        is the request's first-interval width when it starts on a block
        boundary, else None (compare it with :meth:`rows_limit`)."""
        return iter(self._sorted.islice(start, stop))

    def rows_limit(self, num_blocks_free: int | None, tokens_left: int) -> float:
        """The most first-interval rows a block-aligned kept request may take
        and still fit ``num_blocks_free`` blocks: one with more is refused
        for blocks, its admission changing nothing. ``min(rows, tokens)``
        opens at most X blocks exactly when rows or tokens are <= X * block
        size."""
        block_size = self._context[1] if isinstance(self._context, tuple) else None
        if num_blocks_free is None or block_size is None:
            return math.inf
        limit = num_blocks_free * block_size
        return math.inf if tokens_left <= limit else limit

    def admits_none(self, num_blocks_free: int | None, tokens_left: int) -> bool:
        """True when no kept request's first interval fits ``num_blocks_free``
        blocks: every one starts on a block boundary and the fewest rows any
        takes (capped by ``tokens_left``) open more blocks than are free."""
        if num_blocks_free is None or self._num_unaligned or not self._rows:
            return False
        block_size = self._context[1] if isinstance(self._context, tuple) else None
        if block_size is None:
            return False
        rows = min(self._rows[0], tokens_left)
        return rows > 0 and blocks_opened(0, rows, block_size) > num_blocks_free


def arrival_key(view: RequestView) -> Key:
    """Arrival order, then identity: FCFS (the engine numbers arrivals in time order)."""
    return (view.arrival_order, view.request_id, view.generation)


def client_arrival_key(view: RequestView) -> Key:
    """Per client, arrival order, then identity: each client's FCFS queue
    is the group of its id (:meth:`KeptOrder.group`)."""
    return (view.client_id, view.arrival_order, view.request_id, view.generation)


def in_arrival_order(kept: KeptOrder, state: SchedulerState) -> Iterator[RequestView]:
    """``state``'s waiting views by :func:`arrival_key`, from ``kept`` (made
    with ``ready_only=False``), lazily."""
    kept.sync(state, arrival_key)
    return kept.views(state)


def _fresh(ready_only: bool, index_rows: bool = False) -> KeptOrder:
    return KeptOrder(ready_only=ready_only, index_rows=index_rows)


class KeptRanks(NamedTuple):
    """The waiting part of a ranked pass: ``order`` synced to ``state``;
    ``before(key)``: how many of its requests rank before another request's
    rank ``key`` (:meth:`KeptOrder.bisect` when the two keys are one);
    ``skip``: kept ids the pass ranks elsewhere (with the others)."""

    order: KeptOrder
    state: SchedulerState
    before: Callable[[Key], int]
    skip: frozenset[str] | set[str] = frozenset()


def reads_view_deltas(policy: object) -> bool:
    """Whether ``policy`` keeps an order from the state's view deltas (a run
    then records them even when nothing else reads them)."""
    return bool(getattr(policy, "keeps_order", False))
