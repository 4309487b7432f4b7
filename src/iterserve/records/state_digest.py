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
from itertools import compress
from operator import is_not

from iterserve.records.canonical_json import canonical_json
from iterserve.records.codec import state_fields_to_json, view_to_json
from iterserve.records.state import SchedulerState
from iterserve.records.view import RequestView

# a string value no canonical text can hold unescaped after a comma: the
# quotes around a key are never escaped, the quotes inside a string always are
_MARKER = "@@views@@"
_MARKER_TEXT = f',"views":"{_MARKER}"'


class StateDigester:
    """``digest(state) == state_digest(state)``, one instance per run (it
    holds the encoded views of the last state it saw). Per decision the
    work over every live view runs in C (``map``); Python touches only the
    views that changed."""

    __slots__ = ("_view_of", "_text_of", "_order")

    def __init__(self) -> None:
        self._view_of: dict[str, RequestView] = {}  # id -> the view last encoded
        self._text_of: dict[str, str] = {}  # id -> that view's canonical text
        self._order: list[str] = []  # the view ids, sorted

    def digest(self, state: SchedulerState) -> str:
        return hashlib.sha256(self.canonical_text(state).encode()).hexdigest()

    def canonical_text(self, state: SchedulerState) -> str:
        """``dumps(state_to_json(state))``."""
        views, view_of, text_of = state.views, self._view_of, self._text_of
        if view_of.keys() != views.keys():
            for rid in view_of.keys() - views.keys():
                del view_of[rid], text_of[rid]
            self._order = sorted(views)
        order = self._order
        current = list(map(views.__getitem__, order))
        stale = compress(range(len(order)), map(is_not, current, map(view_of.get, order)))
        for index in stale:
            rid, view = order[index], current[index]
            view_of[rid], text_of[rid] = view, canonical_json(view_to_json(view))
        text = canonical_json(state_fields_to_json(state, _MARKER))
        head, marker, tail = text.partition(_MARKER_TEXT)
        if not marker:  # cannot happen for a canonical state; never guess
            raise ValueError("state text has no views marker")
        return f'{head},"views":[{",".join(map(text_of.__getitem__, order))}]{tail}'
