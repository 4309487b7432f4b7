"""Incremental state digests for a run's decision log (log format 4, 0x01A).

The digest (:func:`state_digest`) is sha256 of a canonical text: the
canonical text of the state's fields with the RUNNING
views' texts in id order and, for every other view, one 256-bit element in
an additive multiset hash; the waiting queue enters as such a sum over its
neighbour pairs. On a long overloaded run most views are waiting
requests whose view objects the transitions keep from one state to the
next, and the running ones (at most the sequence budget) change at every
decision.

:class:`StateDigester` keeps each non-RUNNING view's element while its
view object lives, and the sorted ids of the RUNNING views. Per decision it
takes the ids the transitions wrote or deleted since the state it digested
last (the state's :class:`~iterserve.records.view_delta.ViewDelta` links;
where they do not reach back, such as at a run's first state, it encodes
every view again), adds and subtracts the changed elements, and encodes the
RUNNING views (at most the sequence budget, and nearly all of them changed)
in one orjson call, which is their joined text: the same text, so the same
sha256, as ``state_digest`` (the tests pin the two equal over whole runs).
The waiting queue's pair sum follows the ids that left and entered a long
(shared) queue, each at its place (:class:`_Links`), and a short one's runs
of ids kept in order (:func:`common_runs`: slice compares and searches at C
speed); only the pairs at their ends are hashed. Nothing is hashed or encoded per
unchanged non-RUNNING view or waiting id.
"""

from __future__ import annotations

import hashlib
import operator
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterable, Mapping
from itertools import compress, repeat
from operator import is_, not_

import orjson

from iterserve.records.canonical_json import (
    canonical_json,
    canonical_json_bytes,
    is_plain_ascii,
)
from iterserve.records.codec import (
    multiset_element,
    multiset_hex,
    pair_element,
    state_fields_to_json,
    view_to_json,
)
from iterserve.records.id_queue import IdQueue, Queue, queue_changes
from iterserve.records.state import SchedulerState
from iterserve.records.transition import claimed_prefix_rows
from iterserve.records.view import Lifecycle, RequestView, view_lifecycle
from iterserve.records.view_delta import changes_since

# a string value no canonical text can hold unescaped after a comma: the
# quotes around a key are never escaped, the quotes inside a string always are
_MARKER = "@@views@@"
_MARKER_TEXT = f',"views":"{_MARKER}"'.encode()
_RUNNING = Lifecycle.RUNNING


def state_digest(state: SchedulerState) -> str:
    """The log-format-4 state digest of ``state`` on its own (a fresh
    :class:`StateDigester`, which encodes every view once); a run digests
    its states in order with one digester, which encodes only what changed."""
    return StateDigester().digest(state)


class StateDigester:
    """A run's state digests, one instance per run (it holds the encoded
    views of the last state it saw); tests/oracles/state_digest_reference.py
    writes the same digest out over every view."""

    __slots__ = ("_seen", "_running", "_elements", "_others", "_running_ids",
                 "_claim_ids", "_waiting", "_pairs", "_links")

    def __init__(self) -> None:
        self._forget()

    def _forget(self) -> None:
        self._seen: Mapping[str, RequestView] | None = None  # the mapping digested last
        self._running: set[str] = set()  # the ids of the RUNNING views
        self._elements: dict[str, int] = {}  # every other view: its multiset element
        self._others = 0  # the sum of _elements (not reduced)
        self._running_ids: list[str] = []  # _running, sorted
        self._claim_ids: set[str] = set()  # ids whose view may hold a claimed prefix hit
        self._waiting: Queue = ()  # the waiting queue digested last
        self._pairs = pair_element(None, None)  # the sum of its pairs' elements
        self._links: _Links | None = None  # _waiting's neighbours, once it is an IdQueue

    def claimed_prefix_rows(self, state: SchedulerState) -> dict[str, int]:
        """:func:`~iterserve.records.transition.claimed_prefix_rows` of a
        valid ``state`` (waiting members are WAITING views) digested last:
        without a scan of the waiting queue when none of its views is a
        WAITING one that computed rows and emitted nothing."""
        return claimed_prefix_rows(state) if self._claim_ids else {}

    def digest(self, state: SchedulerState) -> str:
        """sha256 of :meth:`canonical_text`, fed piece by piece (the joined
        running texts are hashed where they were joined)."""
        pieces = self._pieces(state)
        hasher = hashlib.sha256(pieces[0])
        for piece in pieces[1:]:
            hasher.update(piece)
        return hasher.hexdigest()

    def canonical_text(self, state: SchedulerState) -> str:
        """The canonical text the digest hashes."""
        return b"".join(self._pieces(state)).decode("ascii")

    def _pieces(self, state: SchedulerState) -> list[bytes]:
        """The canonical text's bytes in order: the other fields' text
        around the views, and the views' value."""
        self._follow(state)
        self._follow_waiting(state.waiting)
        waiting = {"num_ids": len(state.waiting), "pairs": multiset_hex(self._pairs)}
        head, marker, tail = canonical_json_bytes(
            state_fields_to_json(state, _MARKER, waiting)).partition(_MARKER_TEXT)
        if not marker:  # cannot happen for a canonical state
            raise ValueError("state text has no views marker")
        others = multiset_hex(self._others).encode()
        running = encode_view_list(list(map(state.views.__getitem__, self._running_ids)))
        return [head, b',"views":{"others":"', others, b'","running":', running, b"}", tail]

    def _follow_waiting(self, waiting: Queue) -> None:
        """Take in the waiting queue. A shared queue
        (:class:`~iterserve.records.id_queue.IdQueue`) says which ids left
        and entered since the version digested last: each moves the pairs
        at its place only (:class:`_Links`). Otherwise the pairs outside
        the runs of ids it kept in order from the queue digested last are
        subtracted (the old queue's) and added (the new one's)."""
        old = self._waiting
        if waiting is old:
            return
        links = self._links
        changes = queue_changes(old, waiting) if links is not None else None
        if links is not None and changes is not None:
            self._pairs += links.edit(*changes)
        else:
            self._follow_runs(tuple(old), tuple(waiting))
            self._links = _Links(waiting) if isinstance(waiting, IdQueue) else None
        self._waiting = waiting

    def _follow_runs(self, old: tuple[str, ...], waiting: tuple[str, ...]) -> None:
        runs = common_runs(old, waiting)
        before = _loose_pairs(old, [(i, size) for i, _, size in runs])
        after = _loose_pairs(waiting, [(j, size) for _, j, size in runs])
        if before != after:
            counts = Counter(after)
            counts.subtract(before)  # a pair in both is neither added nor subtracted
            self._pairs += sum(count * pair_element(*pair)
                               for pair, count in counts.items() if count)

    def _follow(self, state: SchedulerState) -> None:
        """Take in ``state``'s views: the ids its view delta lists since the
        mapping digested last (:func:`changes_since`), or, where the links
        do not reach it, every view (correct, slower)."""
        views = state.views
        found = changes_since(self._seen, views, state.view_delta)
        gone: list[str] = []
        if found is None:  # start over: every view is encoded again
            self._forget()
            ids = list(views)
        else:
            ids, gone = found
        self._seen = views
        if ids or gone:
            self._update(ids, list(map(views.__getitem__, ids)), gone)

    def _update(self, ids: list[str], changed: list[RequestView], removed: list[str]) -> None:
        """Replace the contributions of ``ids`` by their ``changed`` views'
        and drop those of ``removed``; every step runs over all of them at
        C speed (``map``, ``compress``) but the hash of each new element. A
        RUNNING view contributes its text, which :meth:`_pieces` encodes
        for every RUNNING view at once (each changes at nearly every
        decision); here only its membership is kept."""
        elements = self._elements
        gone = [*ids, *removed]
        self._others -= sum(map(elements.pop, gone, repeat(0)))
        is_running = list(map(is_, map(view_lifecycle, changed), repeat(_RUNNING)))
        if not all(is_running):  # the RUNNING views are encoded by _pieces, all at once
            is_other = list(map(not_, is_running))
            new = list(map(_element, encode_views(list(compress(changed, is_other)))))
            elements.update(zip(compress(ids, is_other), new, strict=True))
            self._others += sum(new)
        was_running = list(map(self._running.__contains__, gone))
        if was_running[:len(ids)] != is_running or any(was_running[len(ids):]):
            self._move_running(gone, was_running, is_running)
        claim_ids = self._claim_ids
        if claim_ids:
            claim_ids.difference_update(gone)
        # the few WAITING views first (at C speed), then the claim test on them
        is_waiting = list(map(is_, map(view_lifecycle, changed), repeat(Lifecycle.WAITING)))
        claim_ids.update(rid for rid, view in zip(compress(ids, is_waiting),
                                                  compress(changed, is_waiting), strict=True)
                         if view.num_computed and not view.num_emitted)

    def _move_running(self, gone: list[str], was_running: list[bool],
                      is_running: list[bool]) -> None:
        """Keep ``_running`` and ``_running_ids`` (sorted): the ids that
        stopped running leave them, those that started join them (each a
        binary search)."""
        running, running_ids = self._running, self._running_ids
        now = is_running + [False] * (len(gone) - len(is_running))  # removed: not running
        moved = list(map(operator.ne, was_running, now))
        for rid, is_now in zip(compress(gone, moved), compress(now, moved), strict=True):
            if is_now:
                running.add(rid)
                insort(running_ids, rid)
            else:
                running.discard(rid)
                del running_ids[bisect_left(running_ids, rid)]


class _Links:
    """A waiting queue's neighbours (``None`` stands for both ends), kept
    by the ids that left and entered it: each edit returns the change of
    the pair sum, the pairs it broke subtracted and those it made added."""

    __slots__ = ("_next", "_prev")

    def __init__(self, queue: Iterable[str]) -> None:
        ids: list[str | None] = [None, *queue, None]
        # the first None is the front's neighbour, the last the back's
        self._next: dict[str | None, str | None] = dict(zip(ids[:-1], ids[1:], strict=True))
        self._prev: dict[str | None, str | None] = dict(zip(ids[1:], ids[:-1], strict=True))

    def edit(self, left: list[str], front: list[str], back: list[str]) -> int:
        nxt, prv = self._next, self._prev
        change = 0
        for rid in left:
            before, after = prv.pop(rid), nxt.pop(rid)
            nxt[before], prv[after] = after, before
            change += (pair_element(before, after) - pair_element(before, rid)
                       - pair_element(rid, after))
        for rid in reversed(front):  # each goes first
            after = nxt[None]
            nxt[None], prv[rid], nxt[rid], prv[after] = rid, None, after, rid
            change += pair_element(None, rid) + pair_element(rid, after) - pair_element(None, after)
        for rid in back:  # each goes last
            before = prv[None]
            nxt[before], prv[rid], nxt[rid], prv[None] = rid, before, None, rid
            change += (pair_element(before, rid) + pair_element(rid, None)
                       - pair_element(before, None))
        return change


def _element(text: bytes) -> int:
    return multiset_element(b"[%b]" % text)


_Pair = tuple[str | None, str | None]


def _loose_pairs(queue: tuple[str, ...], runs: list[tuple[int, int]]) -> list[_Pair]:
    """The neighbour pairs of ``(None, *queue, None)`` not inside one of
    the ``runs`` (``(start, size)`` in ``queue``, in order, apart)."""
    indexes: list[int] = []
    next_index = 0  # pair t is (queue[t - 1], queue[t]), padded
    for start, size in runs:
        indexes += range(next_index, start + 1)
        next_index = start + size
    size = len(queue)
    indexes += range(next_index, size + 1)
    return [(queue[t - 1] if t else None, queue[t] if t < size else None) for t in indexes]


def common_runs(old: tuple[str, ...], new: tuple[str, ...]) -> list[tuple[int, int, int]]:
    """Runs ``(i, j, size)`` with ``old[i:i + size] == new[j:j + size]``,
    in order in both and apart: what ``new`` kept of ``old`` in order.
    Mismatches are resolved at C speed, nearby first (admissions leave the
    front, preempted ids enter it): ``new[j]`` found a little further on in
    ``old`` (the ids before it left), else ``old[i]`` found further on in
    ``new`` (ids entered before it), else ``old[i]`` left."""
    runs = []
    i = j = 0
    while i < len(old) and j < len(new):
        size = _matching_run(old, i, new, j)
        if size:
            runs.append((i, j, size))
            i, j = i + size, j + size
            continue
        try:
            i = old.index(new[j], i, i + _NEARBY)
            continue
        except ValueError:
            pass
        try:
            j = new.index(old[i], j)
        except ValueError:
            i += 1  # old[i] left
    return runs


_GALLOP = 16  # the first slice compared where a whole tail differs
_NEARBY = 64  # ids looked past for a mismatch before the whole queue is searched


def _matching_run(a: tuple[str, ...], i: int, b: tuple[str, ...], j: int) -> int:
    """How many leading items ``a[i:]`` and ``b[j:]`` share, by slice
    compares (pointer compares at C speed): the whole rest first, then
    doubling slices to the first block that differs, then halving it."""
    if a[i] != b[j]:
        return 0
    size = min(len(a) - i, len(b) - j)
    if a[i:i + size] == b[j:j + size]:
        return size
    low, step = 0, _GALLOP
    while True:  # a difference lies within [0, size)
        high = min(low + step, size)
        if a[i + low:i + high] != b[j + low:j + high]:
            break
        low, step = high, step * 2
    while high - low > 1:  # the first difference lies within [low, high)
        middle = (low + high) // 2
        if a[i + low:i + middle] == b[j + low:j + middle]:
            low = middle
        else:
            high = middle
    return low


# view_to_json's fields are the view's first 18, in order; orjson writes the
# two enums (Lifecycle, FinishReason) as their values, as view_to_json does
_FIELDS = operator.itemgetter(slice(0, 18))


def encode_view_list(views: list[RequestView]) -> bytes:
    """``canonical_json([view_to_json(view) for view in views])`` as ASCII
    bytes: one orjson call where its text is the stdlib's, else that
    reference encoding (:func:`canonical_json_bytes`)."""
    if not views:
        return b"[]"
    data = orjson.dumps(list(map(_FIELDS, views)))
    if is_plain_ascii(data):
        return data
    return canonical_json_bytes(list(map(view_to_json, views)))


def encode_views(views: list[RequestView]) -> list[bytes]:
    """``canonical_json(view_to_json(view))`` of each view without its outer
    brackets, as ASCII bytes, at C speed: one orjson call for them all,
    split at the top-level ``],[``. Where a split is not exact (a string
    holding ``],[``) or the text may not be the stdlib's, each view takes
    :func:`canonical_json`."""
    if not views:
        return []
    rows = _split_rows(orjson.dumps(list(map(_FIELDS, views))), len(views))
    if rows is None:
        return [canonical_json(view_to_json(view))[1:-1].encode() for view in views]
    return rows


def _split_rows(data: bytes, num_rows: int) -> list[bytes] | None:
    """The rows of orjson's ``[[...],[...]]`` without their brackets, or
    None when they may not be the stdlib's text or do not split exactly."""
    if not is_plain_ascii(data):
        return None
    rows = data[2:-2].split(b"],[")
    return rows if len(rows) == num_rows else None
