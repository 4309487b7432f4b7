"""The views of a large state, shared with its predecessor (0x01A at scale).

Every transition publishes a new, immutable ``views`` mapping. A plain dict
copied per transition costs O(live): on an overloaded run tens of thousands
of waiting views are copied (and freed) at every decision that changed a
hundred. A :class:`ViewMap` is two layers: a ``base`` dict shared by every
version since the last compaction, never written, and the version's own
table (the dict this class extends) holding the views written since, with
the ids deleted from the base in ``gone``. A transition copies the own
table and ``gone`` only; when the two together grow past
:func:`compaction_size` (about 8 sqrt(n), so their copies stay small beside
n and a compaction's O(n) is paid every few hundred decisions) the layers
are merged into a new base. Deletions count: a draining queue retires
requests from the base at every decision.

Why two layers of dicts and not a HAMT (``immutables.Map``): a lookup in
the own table is the dict's own C lookup, and a decision's hot loops look up
the running views, which every decision rewrites, so they are in the own
table; a HAMT lookup costs about 1.5x a dict's and its update of the
running set costs more than copying a small dict. Below :data:`LAYERED_AT`
live views a state keeps a plain dict (copied whole, as cheap as a small
own table), so small runs pay nothing for this.

Only :func:`edit` and :meth:`ViewDraft.freeze` build a map; a published map
refuses writes. Iteration, ``len``, ``in``, ``get``, equality and pickling
see both layers in the order a plain dict copied and edited the same way
would have (the base's order, then the views new since).
"""

from __future__ import annotations

import math
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, Sequence, ValuesView
from collections.abc import Set as AbstractSet
from itertools import chain, filterfalse
from typing import Any, NoReturn

from iterserve.records.view import RequestView

#: live views at which a plain dict becomes layered (below it a copy is cheaper than a layer)
LAYERED_AT = 4096
_MISSING: Any = object()


def compaction_size(num_views: int) -> int:
    """The own-table size at which the layers are merged."""
    return max(1024, 8 * math.isqrt(num_views))


class _Layers(dict[str, RequestView]):
    """The reads both a published map and a draft make through to the base:
    the own table (this dict) first, then the base less ``_gone``."""

    __slots__ = ("_base", "_gone", "_len")  # one layout, so a draft can become its map

    _base: dict[str, RequestView]
    _gone: AbstractSet[str]
    _len: int

    def __missing__(self, key: str) -> RequestView:
        if key in self._gone:
            raise KeyError(key)
        return self._base[key]

    def get(self, key: str, default: Any = None) -> Any:
        value = dict.get(self, key, _MISSING)
        if value is not _MISSING:
            return value
        if key in self._gone:
            return default
        return self._base.get(key, default)

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or (key in self._base and key not in self._gone)


class ViewMap(_Layers):
    """An immutable two-layer mapping of request id to view (module doc).
    ``_gone``: the base's ids hidden (deleted; one written again after its
    deletion is in the own table too, and iterates as new)."""

    __slots__ = ()

    _gone: frozenset[str]

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[str]:
        base, gone = self._base, self._gone
        if not gone:
            return chain(base, filterfalse(base.__contains__, dict.__iter__(self)))
        return chain(filterfalse(gone.__contains__, base),
                     (key for key in dict.__iter__(self) if key in gone or key not in base))

    def keys(self) -> Any:
        return KeysView(self)

    def values(self) -> Any:
        return ValuesView(self)

    def items(self) -> Any:
        return ItemsView(self)

    def copy(self) -> ViewMap:
        return self  # immutable

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and all(
            other.get(key, _MISSING) == value for key, value in self.items())

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ViewMap({len(self)} views, {dict.__len__(self)} in the own table)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (dict(self.items()),))

    def _refuse(self, *_: object, **__: object) -> NoReturn:
        raise TypeError("a published views mapping is immutable")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _refuse
    __ior__ = _refuse


def _rebuilt(views: dict[str, RequestView]) -> dict[str, RequestView]:
    return views  # a pickled map comes back as a plain dict (one layer)


class ViewDraft(_Layers):
    """The views a transition is building: written like a dict (its own
    table is the new version's), read through to the base; :meth:`freeze`
    publishes it. ``_len`` is the base's length while drafting."""

    __slots__ = ()

    _gone: set[str]

    def __delitem__(self, key: str) -> None:
        in_base = key in self._base and key not in self._gone
        if dict.__contains__(self, key):
            dict.__delitem__(self, key)
        elif not in_base:
            raise KeyError(key)
        if in_base:
            self._gone.add(key)

    def freeze(self) -> dict[str, RequestView]:
        """The published mapping (merged into a new base when the own table is large)."""
        base, gone = self._base, self._gone
        # a view deleted and written again is new (it moves to the end, as in a dict)
        num_shadowing = sum(map(base.__contains__, self)) - len(gone.intersection(self))
        num_views = self._len - len(gone) + dict.__len__(self) - num_shadowing
        if dict.__len__(self) + len(gone) >= compaction_size(num_views):  # writes and deletions
            return _merged(base, gone, self)
        self._gone, self._len = frozenset(gone), num_views  # type: ignore[assignment]
        self.__class__ = ViewMap  # type: ignore[assignment]  # the table is the map's: no copy
        return self


def _merged(base: dict[str, RequestView], gone: Iterable[str],
            own: dict[str, RequestView]) -> dict[str, RequestView]:
    """One plain dict in a plain dict's order: the base's (a written view
    keeps its place) without the deleted, then the views new since."""
    merged = base.copy()
    for key in gone:
        del merged[key]
    merged.update(dict.items(own))
    return merged


def edit(views: Mapping[str, RequestView]) -> dict[str, RequestView]:
    """A writable successor of ``views``: a plain dict copy of a small
    mapping, a :class:`ViewDraft` over a large one (call :func:`publish`)."""
    if type(views) is ViewMap:
        # the own table only: dict.copy and dict(views) would read both layers
        draft = ViewDraft(dict(dict.items(views)))
        draft._base, draft._gone, draft._len = (
            views._base, set(views._gone), len(views._base))
        return draft
    if type(views) is dict and len(views) >= LAYERED_AT:
        draft = ViewDraft()
        draft._base, draft._gone, draft._len = views, set(), len(views)
        return draft
    return views.copy() if type(views) is dict else dict(views)


def publish(views: dict[str, RequestView]) -> dict[str, RequestView]:
    """The immutable mapping a state holds from what :func:`edit` returned."""
    return views.freeze() if type(views) is ViewDraft else views


def views_or_none(views: Mapping[str, RequestView],
                  request_ids: Sequence[str]) -> list[RequestView | None]:
    """``views.get`` of each id: at C speed where every id has a view (a
    layered map's ``get`` is a Python call; its lookup of a view in its own
    table, where the running views are, is the dict's own)."""
    try:
        return list(map(views.__getitem__, request_ids))
    except KeyError:
        return list(map(views.get, request_ids))


def own_table_ids(views: Mapping[str, RequestView]) -> list[str]:
    """The ids in a map's own table (for tests and diagnostics)."""
    return list(dict.__iter__(views)) if isinstance(views, dict) else list(views)


