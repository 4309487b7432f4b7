"""The waiting queue of a large state, shared with its predecessor (0x01A at scale).

A state's queues are immutable sequences of request ids. A tuple edited per
decision costs O(length): on an overloaded run the waiting queue holds tens
of thousands of ids, and every admission (removing its head) and every
arrival (appending) copied all of them. An :class:`IdQueue` is a window
``[lo, hi)`` of an append-only buffer shared by its versions, plus a short
tuple of ids put at the front (preempted requests resume first, 0x0D) and
the ids removed from inside the window (``gone``). Appending extends the
shared buffer in place when this version owns its end (no later version
appended), admitting the head moves ``lo``; each edit costs O(what it
changes). When the removed ids or the consumed prefix of the buffer grow
past a fraction of the queue, the window is copied into a fresh buffer
(amortized O(1) per edit).

:func:`queue_changes` tells a reader that remembers the version it saw last
what left and entered since, from the two versions' windows, in O(changes)
when they share a buffer (the state digest and the state check follow the
queue this way). To every other reader an ``IdQueue`` is a tuple: it
iterates, indexes, slices, compares equal to the tuple of its ids,
concatenates and pickles as one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, filterfalse, islice
from typing import Any, overload

#: ids at which a tuple becomes an :class:`IdQueue` (below it a tuple copy is cheaper)
QUEUED_AT = 2048
_MIN_GONE = 256  # removed ids a window carries at least before it is copied
_MIN_CONSUMED = 4096  # consumed ids a buffer carries at least before the window is copied


class IdQueue(Sequence[str]):
    """An immutable queue of request ids (module doc)."""

    __slots__ = ("_buf", "_lo", "_hi", "_front", "_gone", "_len")

    def __init__(self, ids: Iterable[str] = ()) -> None:
        self._buf: list[str] = list(ids)
        self._lo, self._hi = 0, len(self._buf)
        self._front: tuple[str, ...] = ()
        self._gone: frozenset[str] = frozenset()
        self._len = self._hi

    @classmethod
    def _of(cls, buf: list[str], lo: int, hi: int, front: tuple[str, ...],
            gone: frozenset[str]) -> IdQueue:
        queue = cls.__new__(cls)
        queue._buf, queue._lo, queue._hi, queue._front, queue._gone = buf, lo, hi, front, gone
        queue._len = len(front) + hi - lo - len(gone)
        return queue._compacted()

    # --- edits: each returns a new version ---------------------------------------------

    def appended(self, ids: Sequence[str]) -> IdQueue:
        """This queue with ``ids`` at the back."""
        if not ids:
            return self
        buf = self._buf
        if self._hi == len(buf):  # this version owns the buffer's end: share it
            buf.extend(ids)
            return IdQueue._of(buf, self._lo, len(buf), self._front, self._gone)
        window = [*self._window(), *ids]
        return IdQueue._of(window, 0, len(window), self._front, frozenset())

    def with_front(self, request_id: str) -> IdQueue:
        """This queue with ``request_id`` first."""
        return IdQueue._of(self._buf, self._lo, self._hi, (request_id, *self._front), self._gone)

    def without(self, request_id: str) -> IdQueue:
        """This queue without ``request_id`` (a member: the caller knows it is)."""
        front = self._front
        if request_id in front:
            kept = tuple(rid for rid in front if rid != request_id)
            return IdQueue._of(self._buf, self._lo, self._hi, kept, self._gone)
        buf, lo, gone = self._buf, self._lo, self._gone
        if lo < self._hi and buf[lo] == request_id:  # the head: admissions take it
            lo += 1
            while lo < self._hi and buf[lo] in gone:  # removed before: now behind lo
                gone = gone - {buf[lo]}
                lo += 1
            return IdQueue._of(buf, lo, self._hi, front, gone)
        return IdQueue._of(buf, lo, self._hi, front, gone | {request_id})

    def _compacted(self) -> IdQueue:
        """The same queue in a fresh buffer when the window carries many
        removed ids (each edit copies the set of them) or the buffer a
        consumed prefix as long as the window."""
        size = self._hi - self._lo
        if (len(self._gone) < max(_MIN_GONE, 4 * math.isqrt(size))
                and (self._lo < _MIN_CONSUMED or self._lo < size)):
            return self
        window = list(self._window())
        self._buf, self._lo, self._hi, self._gone = window, 0, len(window), frozenset()
        return self

    def _window(self) -> Iterator[str]:
        ids = map(self._buf.__getitem__, range(self._lo, self._hi))
        return filterfalse(self._gone.__contains__, ids) if self._gone else ids

    # --- a tuple to every reader --------------------------------------------------------

    def __iter__(self) -> Iterator[str]:
        return chain(self._front, self._window()) if self._front else self._window()

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            return tuple(islice(self, start, stop, step)) if step > 0 else tuple(self)[index]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("queue index out of range")
        front = self._front
        if index < len(front):
            return front[index]
        if not self._gone:
            return self._buf[self._lo + index - len(front)]
        return next(islice(self, index, None))

    def __contains__(self, request_id: object) -> bool:
        if request_id in self._front:
            return True
        if request_id in self._gone:
            return False
        try:
            self._buf.index(request_id, self._lo, self._hi)  # type: ignore[arg-type]
        except ValueError:
            return False
        return True

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IdQueue | tuple):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __add__(self, other: Sequence[str]) -> tuple[str, ...]:
        return (*self, *other)

    def __radd__(self, other: Sequence[str]) -> tuple[str, ...]:
        return (*other, *self)

    def __repr__(self) -> str:
        return f"IdQueue({tuple(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))  # a pickled queue comes back as a tuple


Queue = tuple[str, ...] | IdQueue


def appended(queue: Queue, ids: Sequence[str]) -> Queue:
    """``queue`` with ``ids`` at the back (a tuple while short)."""
    if isinstance(queue, IdQueue):
        return queue.appended(ids)
    if len(queue) + len(ids) >= QUEUED_AT:
        return IdQueue((*queue, *ids))
    return (*queue, *ids) if ids else queue


def with_front(queue: Queue, request_id: str) -> Queue:
    if isinstance(queue, IdQueue):
        return queue.with_front(request_id)
    return (request_id, *queue)


def without(queue: Queue, request_id: str) -> Queue:
    """``queue`` without ``request_id``, a member."""
    if isinstance(queue, IdQueue):
        return queue.without(request_id)
    index = queue.index(request_id)
    return queue[:index] + queue[index + 1:]


def queue_changes(seen: Queue, queue: Queue) -> tuple[list[str], list[str], list[str]] | None:
    """``(left, entered_front, entered_back)`` from ``seen`` to ``queue``, a
    later version of it: the ids ``seen`` held that ``queue`` does not, the
    ids ``queue`` holds first that ``seen`` did not hold there (in queue
    order: they precede every other id) and those appended at its back (in
    order). An id that left and came back is in two lists. Where the front
    tuples differ every id of the old front left and every id of the new
    one entered (a short tuple). None when the two do not share a buffer
    (read the whole queue): O(what changed) otherwise."""
    if queue is seen:
        return [], [], []
    if not (isinstance(seen, IdQueue) and isinstance(queue, IdQueue)
            and seen._buf is queue._buf and seen._lo <= queue._lo and seen._hi <= queue._hi):
        return None
    buf, seen_gone, gone = seen._buf, seen._gone, queue._gone
    left = [rid for rid in buf[seen._lo:min(queue._lo, seen._hi)] if rid not in seen_gone]
    appended = buf[max(seen._hi, queue._lo):queue._hi]
    if gone is not seen_gone and gone:
        new_gone = gone - seen_gone
        if new_gone:
            late = new_gone.intersection(appended)  # appended, then removed: never seen
            left += [rid for rid in new_gone if rid not in late]
            appended = [rid for rid in appended if rid not in late]
    if seen._front == queue._front:
        return left, [], appended
    return [*seen._front, *left], list(queue._front), appended
