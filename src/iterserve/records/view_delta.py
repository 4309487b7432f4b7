"""Which views a run's transitions replaced, kept beside the state (0x01A).

Per decision the decision log's digest and the run's state check need the
views that changed since the last state they saw; on a long overloaded run
thousands of waiting views did not. Every transition that builds a new
views mapping (:func:`iterserve.records.transition._successor`) records the
ids it wrote or deleted in a :class:`ViewDelta`, linked to the delta of the
mapping it started from, so a reader that remembers the mapping it saw
last walks a few links instead of every view (:func:`changes_since`).

A delta is tied to the mapping it made, by identity, as a
:class:`~iterserve.records.rows_bound.RowsBound` is: a state whose views
were swapped under it (``dataclasses.replace``), a state built without
one, or a reader further behind than the links kept (:data:`MAX_LINKS`)
gets None, and the reader re-reads every view. A delta never changes what
a state is: it is not encoded and not compared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain, compress
from operator import not_

from iterserve.records.view import RequestView

MAX_LINKS = 8  # links kept behind a delta (a reader is a few transitions behind); cut to half when reached

_Views = Mapping[str, RequestView]


@dataclass(frozen=True, slots=True)
class ViewDelta:
    """``views`` is ``base`` with the ids in ``touched`` written (changed or
    new: a superset is allowed) and those in ``removed`` deleted."""

    base: _Views = field(repr=False, compare=False)
    views: _Views = field(repr=False, compare=False)
    touched: tuple[str, ...]
    removed: tuple[str, ...]
    previous: ViewDelta | None = field(repr=False, compare=False)  # the delta that made base
    num_links: int = 1  # this delta and those behind it
    # the last answer of changes_since: [seen, answer] (the run's digester
    # and state checker ask the same question of each decision's state)
    answered: list[object] = field(default_factory=list, repr=False, compare=False)


#: the delta of every state in a run whose views no reader follows (the run's process of a
#: followed simulation: its follower digests and checks the states): a transition from such a
#: state records nothing and hands it on; a reader given it re-reads every view
UNTRACKED = ViewDelta({}, {}, (), (), None, 0)


def next_delta(base_delta: ViewDelta | None, base: _Views, views: _Views,
               touched: Iterable[str], removed: Iterable[str] = ()) -> ViewDelta:
    """The delta of a transition from ``base`` (whose state carried
    ``base_delta``) to ``views``; :data:`UNTRACKED` from an untracked state."""
    if base_delta is UNTRACKED:
        return UNTRACKED
    previous = base_delta if base_delta is not None and base_delta.views is base else None
    if previous is not None and previous.num_links >= MAX_LINKS:
        previous = _cut(previous, MAX_LINKS // 2)
    return ViewDelta(base, views, tuple(touched), tuple(removed), previous,
                     1 + (0 if previous is None else previous.num_links))


def _cut(delta: ViewDelta, num_links: int) -> ViewDelta:
    """``delta`` with its newest ``num_links`` links only (copied)."""
    kept: list[ViewDelta] = []
    link: ViewDelta | None = delta
    while link is not None and len(kept) < num_links:
        kept.append(link)
        link = link.previous
    cut: ViewDelta | None = None
    for number, link in enumerate(reversed(kept), start=1):
        cut = ViewDelta(link.base, link.views, link.touched, link.removed, cut, number)
    assert cut is not None
    return cut


def changes_since(seen: _Views | None, views: _Views,
                  delta: ViewDelta | None) -> tuple[list[str], list[str]] | None:
    """``(ids, gone)``: the ids of ``views`` whose view may differ from
    ``seen``'s (new ones included; each once) and the ids written or
    deleted since that are not in ``views``; None when the links do not
    reach back to ``seen`` (re-read every view). The lists are shared
    with later callers asking the same: read them, do not change them."""
    if views is seen:
        return [], []
    if seen is None or delta is None or delta.views is not views:
        return None
    answered = delta.answered
    if answered and answered[0] is seen:
        return answered[1]  # type: ignore[return-value]
    answer = _changes_since(seen, views, delta)
    answered[:] = [seen, answer]
    return answer


def _changes_since(seen: _Views, views: _Views,
                   delta: ViewDelta) -> tuple[list[str], list[str]] | None:
    links = [delta]
    while links[-1].base is not seen:
        previous = links[-1].previous
        if previous is None:
            return None
        links.append(previous)
    listed = dict.fromkeys(chain.from_iterable(
        chain(link.touched, link.removed) for link in links))  # each id once, in order
    present = list(map(views.__contains__, listed))
    if all(present):
        return list(listed), []
    return (list(compress(listed, present)),
            list(compress(listed, map(not_, present))))
