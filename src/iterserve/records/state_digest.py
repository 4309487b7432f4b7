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
from bisect import insort
from collections.abc import Mapping
from itertools import compress
from operator import is_not

import orjson

from iterserve.records.canonical_json import canonical_json, is_plain_ascii
from iterserve.records.codec import state_fields_to_json, view_to_json
from iterserve.records.state import SchedulerState
from iterserve.records.view import FinishReason, Lifecycle, RequestView

# a string value no canonical text can hold unescaped after a comma: the
# quotes around a key are never escaped, the quotes inside a string always are
_MARKER = "@@views@@"
_MARKER_TEXT = f',"views":"{_MARKER}"'


class StateDigester:
    """``digest(state) == state_digest(state)``, one instance per run (it
    holds the encoded views of the last state it saw). Per decision the
    work over every live view runs in C (``map``, ``compress``); the views
    that changed are encoded together by one :func:`encode_views` call."""

    __slots__ = ("_view_of", "_text_of", "_order")

    def __init__(self) -> None:
        self._view_of: dict[str, RequestView] = {}  # id -> the view last encoded
        self._text_of: dict[str, str] = {}  # id -> that view's canonical text, brackets off
        self._order: list[str] = []  # the view ids, sorted

    def digest(self, state: SchedulerState) -> str:
        return hashlib.sha256(self.canonical_text(state).encode()).hexdigest()

    def canonical_text(self, state: SchedulerState) -> str:
        """``dumps(state_to_json(state))``."""
        views, view_of, text_of = state.views, self._view_of, self._text_of
        if view_of.keys() != views.keys():
            self._reorder(views)
        order = self._order
        current = list(map(views.__getitem__, order))
        stale = list(map(is_not, current, map(view_of.get, order)))
        if any(stale):
            changed = list(compress(current, stale))
            ids = list(compress(order, stale))
            view_of.update(zip(ids, changed))
            text_of.update(zip(ids, encode_views(changed)))
        text = canonical_json(state_fields_to_json(state, _MARKER))
        head, marker, tail = text.partition(_MARKER_TEXT)
        if not marker:  # cannot happen for a canonical state; never guess
            raise ValueError("state text has no views marker")
        if not order:
            return f'{head},"views":[]{tail}'
        return f'{head},"views":[[{"],[".join(map(text_of.__getitem__, order))}]]{tail}'

    def _reorder(self, views: Mapping[str, RequestView]) -> None:
        """Forget retired views; the sorted order of the live ones (a few
        arrivals join a long sorted list: inserted, not sorted again)."""
        view_of, text_of, order = self._view_of, self._text_of, self._order
        gone = view_of.keys() - views.keys()
        for rid in gone:
            del view_of[rid], text_of[rid]
        new = views.keys() - view_of.keys()
        if len(new) + len(gone) > len(order) // 8:
            self._order = sorted(views)
            return
        if gone:
            order[:] = [rid for rid in order if rid not in gone]
        for rid in new:
            insort(order, rid)


# view_to_json's 18 fields in four runs: the scalars before the lifecycle, the
# lifecycle, the scalars after it, the finish reason. The two enums are
# written from tables (orjson would read each ``.value`` at Python speed).
_HEAD = operator.itemgetter(slice(0, 12))
_LIFECYCLE = operator.itemgetter(12)
_TAIL = operator.itemgetter(slice(13, 17))
_REASON = operator.itemgetter(17)
_LIFECYCLE_TEXT = {member: f'"{member.value}"' for member in Lifecycle}
_REASON_TEXT: dict[FinishReason | None, str] = {
    None: "null", **{member: f'"{member.value}"' for member in FinishReason}}


def encode_views(views: list[RequestView]) -> list[str]:
    """``canonical_json(view_to_json(view))`` of each view without its outer
    brackets, at C speed: one orjson call per run of scalar fields, split at
    the top-level ``],[``. Where a split is not exact (a string holding
    ``],[``) or the text may not be the stdlib's, each view takes
    :func:`canonical_json`."""
    heads = _split_rows(orjson.dumps(list(map(_HEAD, views))), len(views))
    tails = _split_rows(orjson.dumps(list(map(_TAIL, views))), len(views))
    if heads is None or tails is None:
        return [canonical_json(view_to_json(view))[1:-1] for view in views]
    lifecycles = map(_LIFECYCLE_TEXT.__getitem__, map(_LIFECYCLE, views))
    reasons = map(_REASON_TEXT.__getitem__, map(_REASON, views))
    return list(map(",".join, zip(heads, lifecycles, tails, reasons)))


def _split_rows(data: bytes, num_rows: int) -> list[str] | None:
    """The rows of orjson's ``[[...],[...]]`` without their brackets, or
    None when they may not be the stdlib's text or do not split exactly."""
    if not is_plain_ascii(data):
        return None
    rows = data[2:-2].decode("ascii").split("],[")
    return rows if len(rows) == num_rows else None
