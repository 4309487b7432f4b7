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
    """An immutable queue of request ids (module doc). The ids put first
    are a second append-only buffer, ``_fbuf[:_fhi]``, read backwards (the
    last put is first). A removal from anywhere but the main window's head
    is recorded: by id in the main window (an id is appended there once, on
    arrival) and by position in the front one (a request preempted again
    is put first again), so every edit leaves the shared buffers as they
    were. ``_fpos`` maps an id to its last position in the front buffer
    (shared by the versions sharing that buffer)."""

    __slots__ = ("_buf", "_lo", "_hi", "_gone", "_fbuf", "_fhi", "_fpos", "_fgone", "_len")

    def __init__(self, ids: Iterable[str] = ()) -> None:
        self._buf: list[str] = list(ids)
        self._lo, self._hi = 0, len(self._buf)
        self._gone: frozenset[str] = frozenset()
        self._fbuf: list[str] = []
        self._fhi = 0
        self._fpos: dict[str, int] = {}
        self._fgone: frozenset[int] = frozenset()
        self._len = self._hi

    def _of(self, lo: int, hi: int, gone: frozenset[str], fhi: int,
            fgone: frozenset[int]) -> IdQueue:
        """A version over this one's buffers."""
        queue = IdQueue.__new__(IdQueue)
        queue._buf, queue._lo, queue._hi, queue._gone = self._buf, lo, hi, gone
        queue._fbuf, queue._fhi, queue._fpos, queue._fgone = self._fbuf, fhi, self._fpos, fgone
        queue._len = fhi - len(fgone) + hi - lo - len(gone)
        return queue._compacted()

    @staticmethod
    def _fresh(front: list[str], window: list[str]) -> IdQueue:
        """A version in new buffers: ``front`` in buffer order (last is first)."""
        queue = IdQueue(window)
        queue._fbuf, queue._fhi = front, len(front)
        queue._fpos = {rid: i for i, rid in enumerate(front)}
        queue._len += len(front)
        return queue

    # --- edits: each returns a new version ---------------------------------------------

    def appended(self, ids: Sequence[str]) -> IdQueue:
        """This queue with ``ids`` at the back."""
        if not ids:
            return self
        if self._hi == len(self._buf):  # this version owns the buffer's end: share it
            self._buf.extend(ids)
            return self._of(self._lo, len(self._buf), self._gone, self._fhi, self._fgone)
        return IdQueue._fresh(self._front_window(), [*self._window(), *ids])

    def with_front(self, request_id: str) -> IdQueue:
        """This queue with ``request_id`` first."""
        fbuf = self._fbuf
        if self._fhi == len(fbuf):  # this version owns the front buffer's end
            self._fpos[request_id] = len(fbuf)
            fbuf.append(request_id)
            return self._of(self._lo, self._hi, self._gone, len(fbuf), self._fgone)
        return IdQueue._fresh([*self._front_window(), request_id], list(self._window()))

    def without(self, request_id: str) -> IdQueue:
        """This queue without ``request_id`` (a member: the caller knows it is)."""
        lo, hi, gone = self._lo, self._hi, self._gone
        position = self._front_position(request_id)
        if position is not None:
            return self._of(lo, hi, gone, self._fhi, self._fgone | {position})
        buf = self._buf
        if lo < hi and buf[lo] == request_id:  # the main window's head: admissions
            lo += 1
            while lo < hi and buf[lo] in gone:  # removed before: now behind lo
                gone = gone - {buf[lo]}
                lo += 1
            return self._of(lo, hi, gone, self._fhi, self._fgone)
        return self._of(lo, hi, gone | {request_id}, self._fhi, self._fgone)

    def _front_position(self, request_id: str) -> int | None:
        """Where ``request_id`` is live in this version's front, if it is."""
        position = self._fpos.get(request_id)
        if position is None:
            return None
        fbuf, fgone = self._fbuf, self._fgone
        if position >= self._fhi:  # put first again in a later version: look back
            try:
                position = len(fbuf) - 1 - fbuf[::-1].index(request_id, len(fbuf) - self._fhi)
            except ValueError:
                return None
        return None if position in fgone or fbuf[position] != request_id else position

    def _compacted(self) -> IdQueue:
        """The same queue in fresh buffers when the windows carry many
        removed ids (each edit copies the set of them) or the main buffer a
        consumed prefix as long as its window."""
        size = self._hi - self._lo + self._fhi
        num_gone = len(self._gone) + len(self._fgone)
        if (num_gone < max(_MIN_GONE, 4 * math.isqrt(size))
                and (self._lo < _MIN_CONSUMED or self._lo < size)):
            return self
        return IdQueue._fresh(self._front_window(), list(self._window()))

    def _window(self) -> Iterator[str]:
        ids = map(self._buf.__getitem__, range(self._lo, self._hi))
        return filterfalse(self._gone.__contains__, ids) if self._gone else ids

    def _front_window(self) -> list[str]:
        """The front's live ids in buffer order (the last is first in the queue)."""
        fgone = self._fgone
        if not fgone:
            return self._fbuf[:self._fhi]
        return [rid for i, rid in enumerate(self._fbuf[:self._fhi]) if i not in fgone]

    def _front(self) -> Iterator[str]:
        positions: Iterable[int] = range(self._fhi - 1, -1, -1)
        if self._fgone:
            positions = filterfalse(self._fgone.__contains__, positions)
        return map(self._fbuf.__getitem__, positions)

    # --- a tuple to every reader --------------------------------------------------------

    def __iter__(self) -> Iterator[str]:
        return chain(self._front(), self._window()) if self._fhi else self._window()

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
        if not self._gone and not self._fgone:
            if index < self._fhi:
                return self._fbuf[self._fhi - 1 - index]
            return self._buf[self._lo + index - self._fhi]
        return next(islice(self, index, None))

    def __contains__(self, request_id: object) -> bool:
        if not isinstance(request_id, str):
            return False
        if self._front_position(request_id) is not None:
            return True
        if request_id in self._gone:
            return False
        try:
            self._buf.index(request_id, self._lo, self._hi)
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
    ids put first since (in queue order: they precede every other id) and
    those appended at the back (in order). An id that left and came back is
    in two lists. None when the two do not share their buffers (read the
    whole queue): O(what changed) otherwise."""
    if queue is seen:
        return [], [], []
    if not (isinstance(seen, IdQueue) and isinstance(queue, IdQueue)
            and seen._buf is queue._buf and seen._fbuf is queue._fbuf
            and seen._lo <= queue._lo and seen._hi <= queue._hi and seen._fhi <= queue._fhi):
        return None
    buf, fbuf, seen_gone, gone = seen._buf, seen._fbuf, seen._gone, queue._gone
    left = [rid for rid in buf[seen._lo:min(queue._lo, seen._hi)] if rid not in seen_gone]
    appended = buf[max(seen._hi, queue._lo):queue._hi]
    new_gone = gone - seen_gone if gone is not seen_gone else frozenset()
    if new_gone:
        late = new_gone.intersection(appended)  # appended, then removed: never seen
        left += [rid for rid in new_gone if rid not in late]
        if late:
            appended = [rid for rid in appended if rid not in late]
    fgone = queue._fgone - seen._fgone if queue._fgone is not seen._fgone else frozenset()
    left += [fbuf[i] for i in sorted(fgone) if i < seen._fhi]
    pushed = [fbuf[i] for i in range(queue._fhi - 1, seen._fhi - 1, -1) if i not in fgone]
    return left, pushed, appended
