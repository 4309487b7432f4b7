"""Incremental state digests for a run's decision log (0x01A).

:func:`~iterserve.records.codec.state_digest` encodes every live view at
every decision; on a long overloaded run most of them are waiting requests
whose views did not change since the last decision (the transition keeps
the same view object). :class:`StateDigester` keeps each view's canonical
text while its view object lives and re-encodes only new or changed views,
then splices them into the canonical text of the other fields: the same
text, so the same sha256, as ``state_digest`` (the tests pin the two
equal over whole runs).
"""

from __future__ import annotations

import hashlib
import operator
from bisect import bisect, bisect_left
from collections.abc import Mapping
from itertools import compress, islice, repeat
from operator import is_not
from typing import cast

import orjson

from iterserve.records.canonical_json import (
    canonical_json,
    canonical_json_bytes,
    canonical_strings_bytes,
    is_plain_ascii,
)
from iterserve.records.codec import state_fields_to_json, view_to_json
from iterserve.records.state import SchedulerState
from iterserve.records.transition import claimed_prefix_rows
from iterserve.records.view import Lifecycle, RequestView

# a string value no canonical text can hold unescaped after a comma: the
# quotes around a key are never escaped, the quotes inside a string always are
_MARKER = "@@views@@"
_MARKER_TEXT = f',"views":"{_MARKER}"'.encode()
# "waiting", the key after "views", is spliced in too: its ids are encoded
# apart (no number scans over a long queue's ids)
_WAITING_MARKER = "@@waiting@@"
_WAITING_TEXT = f',"waiting":"{_WAITING_MARKER}"'.encode()


class StateDigester:
    """``digest(state) == state_digest(state)``, one instance per run (it
    holds the encoded views of the last state it saw). Per decision the
    work over every live view runs in C (``map``, ``compress``); the views
    that changed are encoded together by one :func:`encode_views` call."""

    __slots__ = ("_order", "_views", "_texts", "_claim_ids")

    def __init__(self) -> None:
        # three parallel lists in request-id order: the ids, the view each
        # had when last encoded, and that view's canonical text without brackets
        self._order: list[str] = []
        self._views: list[RequestView | None] = []  # None: not encoded yet
        self._texts: list[bytes | None] = []
        self._claim_ids: set[str] = set()  # ids whose view may hold a claimed prefix hit

    def claimed_prefix_rows(self, state: SchedulerState) -> dict[str, int]:
        """:func:`~iterserve.records.transition.claimed_prefix_rows` of a
        valid ``state`` (waiting members are WAITING views) digested last:
        without a scan of the waiting queue when none of its views is a
        WAITING one that computed rows and emitted nothing."""
        return claimed_prefix_rows(state) if self._claim_ids else {}

    def digest(self, state: SchedulerState) -> str:
        """sha256 of :meth:`canonical_text`, fed piece by piece: the long
        views text is hashed where it was joined, never copied again."""
        pieces = self._pieces(state)
        hasher = hashlib.sha256(pieces[0])
        for piece in pieces[1:]:
            hasher.update(piece)
        return hasher.hexdigest()

    def canonical_text(self, state: SchedulerState) -> str:
        """``dumps(state_to_json(state))``."""
        return b"".join(self._pieces(state)).decode("ascii")

    def _pieces(self, state: SchedulerState) -> list[bytes]:
        """The canonical text's bytes in order: the other fields' text
        around the views, and the views' cached texts joined."""
        views = state.views
        if list(views) == self._order:  # the mapping in id order (arrival order, often)
            current = list(views.values())  # no lookup per view
        else:
            found = list(map(views.get, self._order))  # None: retired
            if len(views) != len(found) or not all(found):  # a view is a non-empty tuple
                current = self._reorder(views, found)
            else:
                current = cast(list[RequestView], found)
        stale = _changed_positions(current, self._views)
        if stale:
            self._encode(current, stale)
        fields = state_fields_to_json(state, _MARKER)
        fields["waiting"] = _WAITING_MARKER
        head, marker, rest = canonical_json_bytes(fields).partition(_MARKER_TEXT)
        middle, waiting_marker, tail = rest.partition(_WAITING_TEXT)
        if not marker or not waiting_marker:  # cannot happen for a canonical state
            raise ValueError("state text has no views or waiting marker")
        waiting = [middle, b',"waiting":', canonical_strings_bytes(state.waiting), tail]
        if not current:
            return [head, b',"views":[]', *waiting]
        return [head, b',"views":[[', b"],[".join(self._texts),  # type: ignore[arg-type]
                b"]]", *waiting]

    def _encode(self, current: list[RequestView], stale: list[int]) -> None:
        """Encode the views of ``current`` (in id order) at the ``stale``
        positions; remember them."""
        changed = list(map(current.__getitem__, stale))
        texts = self._texts
        for index, text in zip(stale, encode_views(changed), strict=True):
            texts[index] = text
        self._views = current  # type: ignore[assignment]
        ids = list(map(self._order.__getitem__, stale))
        claim_ids = self._claim_ids
        if claim_ids:
            claim_ids.difference_update(ids)
        # the few WAITING views first (at C speed), then the claim test on them
        is_waiting = list(map(operator.is_, map(_LIFECYCLE, changed), repeat(Lifecycle.WAITING)))
        claim_ids.update(rid for rid, view in zip(compress(ids, is_waiting),
                                                  compress(changed, is_waiting), strict=True)
                         if view.num_computed and not view.num_emitted)

    def _reorder(self, views: Mapping[str, RequestView],
                 current: list[RequestView | None]) -> list[RequestView]:
        """Forget retired views and place new ids in order (a few arrivals
        join a long sorted list: inserted, not sorted again); the state's
        views in the new order (the kept ones are ``current``'s, not
        looked up again)."""
        kept = list(map(is_not, current, repeat(None)))
        if not all(kept):
            self._claim_ids.difference_update(compress(self._order, map(operator.not_, kept)))
            order = list(compress(self._order, kept))
            encoded = list(compress(self._views, kept))
            texts = list(compress(self._texts, kept))
            found = list(compress(current, kept))
        else:  # nothing retired: only arrivals
            order, encoded, texts, found = self._order, self._views, self._texts, current
        new = _new_ids(views, order)
        if len(new) > len(order) // 8:
            pairs = dict(zip(order, zip(encoded, texts, strict=True), strict=True))
            order = sorted(views)
            encoded = [pairs.get(rid, _NOTHING)[0] for rid in order]
            texts = [pairs.get(rid, _NOTHING)[1] for rid in order]
            found = list(map(views.__getitem__, order))
        else:
            for rid in sorted(new):
                index = bisect(order, rid)
                order.insert(index, rid)
                encoded.insert(index, None)
                texts.insert(index, None)
                found.insert(index, views[rid])
        self._order, self._views, self._texts = order, encoded, texts
        return cast(list[RequestView], found)


_NOTHING = (None, None)
_CHUNK = 32  # views compared as one slice before any is compared alone


def _changed_positions(current: list[RequestView], before: list[RequestView | None]) -> list[int]:
    """The positions where ``current`` holds a view ``before`` does not (a
    view object that changed, or None before). Whole slices are compared
    first (one pointer compare a view where nothing changed: the waiting
    ids after the running ones); only a slice that differs is compared
    view by view. An equal view that is a new object counts as unchanged:
    its text is the same."""
    if len(before) != len(current):  # cannot happen after _reorder; never guess
        return list(range(len(current)))
    stale: list[int] = []
    for start in range(0, len(current), _CHUNK):
        end = start + _CHUNK
        now, then = current[start:end], before[start:end]
        if now != then:
            stale += compress(range(start, end), map(is_not, now, then))
    return stale


def _new_ids(views: Mapping[str, RequestView], known: list[str]) -> set[str]:
    """The ids of ``views`` not in ``known`` (sorted, all of them in
    ``views``). Arrivals join a state's views last, so the last few keys are
    tried first (a binary search each); any doubt takes the set difference."""
    num_new = len(views) - len(known)
    if num_new <= 0:
        return set()
    if not isinstance(views, dict):
        return views.keys() - known
    last = list(islice(reversed(views), num_new))
    if all(not _contains(known, rid) for rid in last):
        return set(last)  # num_new keys, none known: exactly the new ones
    return views.keys() - known


def _contains(ordered: list[str], rid: str) -> bool:
    index = bisect_left(ordered, rid)
    return index < len(ordered) and ordered[index] == rid


# view_to_json's fields are the view's first 18, in order; orjson writes the
# two enums (Lifecycle, FinishReason) as their values, as view_to_json does
_FIELDS = operator.itemgetter(slice(0, 18))
_LIFECYCLE = operator.itemgetter(12)


def encode_views(views: list[RequestView]) -> list[bytes]:
    """``canonical_json(view_to_json(view))`` of each view without its outer
    brackets, as ASCII bytes, at C speed: one orjson call for them all,
    split at the top-level ``],[``. Where a split is not exact (a string
    holding ``],[``) or the text may not be the stdlib's, each view takes
    :func:`canonical_json`."""
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
