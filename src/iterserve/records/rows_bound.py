"""An upper bound on the rows a live request needs through its next
emission, kept by the transitions (0x0C: abort what never fits).

The plan builder aborts every request whose ``p + e`` rows
(:func:`iterserve.records.frontier.rows_through_next_emission`) exceed the
whole KV pool, and skips that pass when the largest ``p + e`` over the
state's views fits. ``p`` is fixed per request and ``e`` changes only when a
completed interval emits, so the transitions carry a bound forward from the
views they replace: an arrival or a completion can raise it, nothing lowers
it. It is an upper bound, never a guess: whenever it exceeds the pool (a
request that never fits is in view) it is recomputed exactly, so the
builder's pass runs exactly when the full maximum says it must. A bound is
tied to the views mapping it was made for; a state whose views were swapped
under it (``dataclasses.replace``) falls back to the full pass.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from iterserve.records.view import RequestView

_PROMPT = operator.attrgetter("num_prompt_tokens")
_EMITTED = operator.attrgetter("num_emitted")


@dataclass(frozen=True, slots=True)
class RowsBound:
    """``max_rows`` >= ``p + e`` of every view in ``views`` (that mapping,
    by identity)."""

    views: Mapping[str, RequestView] = field(repr=False, compare=False)
    max_rows: int


def max_rows_through_next_emission(
        views: Mapping[str, RequestView] | Sequence[RequestView]) -> int:
    """max of ``p + e`` over a mapping's views or a sequence of views, with
    no Python-level call per view (the full pass the bound stands in for)."""
    values = views.values() if isinstance(views, Mapping) else views
    if not values:
        return 0
    return max(map(operator.add, map(_PROMPT, values), map(_EMITTED, values)))


def bound_of(views: Mapping[str, RequestView], bound: RowsBound | None) -> int:
    """The bound when it belongs to ``views``, else the full maximum."""
    if bound is not None and bound.views is views:
        return bound.max_rows
    return max_rows_through_next_emission(views)


def carried(old_views: Mapping[str, RequestView], old: RowsBound | None,
            views: Mapping[str, RequestView], changed: Sequence[RequestView],
            max_rows_total: int | None, *, rise: int | None = None) -> RowsBound:
    """The bound for ``views``, made from ``old_views`` by replacing or
    adding the ``changed`` views (every view whose ``p + e`` may differ) and
    by changes that keep ``p + e``. ``max_rows_total``: the pool's rows
    (None: unbounded); above it the bound is recomputed exactly. ``rise``:
    how much ``p + e`` can have risen from a changed view's old view at most
    (every changed view replaces one of ``old_views``: a completed interval
    emits once at most), so the changed views are not read; the bound then
    drifts up by ``rise`` a cut until it passes the pool and is recomputed."""
    if old is None or old.views is not old_views:
        return RowsBound(views, max_rows_through_next_emission(views))
    bound = old.max_rows
    if changed:  # about one view per running request
        bound = (bound + rise if rise is not None
                 else max(bound, max_rows_through_next_emission(changed)))
    if max_rows_total is not None and bound > max_rows_total:
        bound = max_rows_through_next_emission(views)  # tight again once it retired
    return RowsBound(views, bound)
