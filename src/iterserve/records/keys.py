"""The vocabulary of tie-break key fields (0x01A "tie-break evidence").

A policy declares its ordering key as a tuple of field names from this
registry and records each work item's key values. Because every field is
recomputable from the published state, the validator can replay the
evidence; a name outside the registry is rejected rather than trusted.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from itertools import repeat
from typing import Any, TypeVar

from iterserve.records.frontier import phase_rank
from iterserve.records.state import SchedulerState
from iterserve.records.view import Lifecycle, RequestView, view_lifecycle

KeyField = Callable[[SchedulerState, RequestView], object]


def _phase_rank(state: SchedulerState, view: RequestView) -> int:
    """Decode rows 0, rebuild 1, prefill 2: decode-first phase order."""
    return phase_rank(view.num_prompt_tokens, view.num_emitted, view.num_computed)


#: ``queue_rank`` by lifecycle: running 0, waiting 2, any other (suspended) 1
_QUEUE_RANKS = {Lifecycle.RUNNING: 0, Lifecycle.WAITING: 2}
_SUSPENDED_RANK = 1
#: ``(queue_rank,)`` by lifecycle, the head of a key tuple (hot path: no tuple built)
_QUEUE_RANK_HEADS = {lifecycle: (rank,) for lifecycle, rank in _QUEUE_RANKS.items()}
_SUSPENDED_HEAD = (_SUSPENDED_RANK,)


def _queue_rank(state: SchedulerState, view: RequestView) -> int:
    """Running before suspended before waiting (vLLM-style running-first)."""
    return _QUEUE_RANKS.get(view.lifecycle, _SUSPENDED_RANK)


def _client_service(state: SchedulerState, view: RequestView) -> int:
    return state.service.get(view.client_id, 0)


def _client_counter(state: SchedulerState, view: RequestView) -> float:
    """The client's VTC counter at this cut (0 without a ledger)."""
    ledger = state.ledger
    return 0.0 if ledger is None else ledger.counter(view.client_id)


def _client_done(state: SchedulerState, view: RequestView) -> float:
    """The client's weighted completed service W_done at this cut."""
    ledger = state.ledger
    return 0.0 if ledger is None else ledger.done_of(view.client_id)


def _prefix_hit_rows(state: SchedulerState, view: RequestView) -> int:
    """Cached prompt rows the memory owner published for ``view`` (F62)."""
    return state.prefix_hits.get(view.request_id, 0)


#: Key fields that are plain view attributes: read with one C-level itemgetter.
VIEW_ATTRIBUTES: dict[str, str] = {
    "priority_rank": "priority",
    "arrival": "arrival",
    "arrival_order": "arrival_order",
    "request_id": "request_id",
    "request_generation": "generation",
    "client_id": "client_id",
}
_FIELD_INDEX = {name: index for index, name in enumerate(RequestView._fields)}


def _fields_getter(names: tuple[str, ...]) -> Callable[[RequestView], Any]:
    """One C-level itemgetter over the RequestView fields of the view-attribute
    key ``names`` (a field read by index: no attribute lookup per field)."""
    return operator.itemgetter(*(_FIELD_INDEX[VIEW_ATTRIBUTES[name]] for name in names))


def _view_attribute(attribute: str) -> KeyField:
    getter = operator.attrgetter(attribute)
    return lambda state, view: getter(view)


KEY_FIELDS: dict[str, KeyField] = {
    "phase_rank": _phase_rank,
    "prefill_first_rank": lambda s, v: 2 - _phase_rank(s, v),
    "queue_rank": _queue_rank,
    "client_service": _client_service,
    "client_counter": _client_counter,
    "client_done": _client_done,
    "prefix_hit_rows": _prefix_hit_rows,
    **{name: _view_attribute(attribute) for name, attribute in VIEW_ATTRIBUTES.items()},
}


def compute_key(
    names: tuple[str, ...], state: SchedulerState, view: RequestView
) -> tuple[object, ...]:
    """The key of ``view`` under the declared field names."""
    return tuple(KEY_FIELDS[name](state, view) for name in names)


def key_function(
    names: tuple[str, ...], state: SchedulerState
) -> Callable[[RequestView], tuple[object, ...]]:
    """A sort key over views, for policies: ``sorted(views, key=...)``.

    Keys made only of view attributes compile to one itemgetter (hot path).
    Compiled once per key shape (:func:`_key_maker`); a key that reads the
    state binds it here.
    """
    return _key_maker(names)(state)


KeyOf = Callable[[RequestView], tuple[object, ...]]


@functools.lru_cache(maxsize=64)
def _key_maker(names: tuple[str, ...]) -> Callable[[SchedulerState], KeyOf]:
    """``state -> key`` for :func:`key_function`: the getters are built
    once per key shape (every plan builder and the validator ask each
    decision), the state is bound per call. A pure function of ``names``."""
    if names and all(name in VIEW_ATTRIBUTES for name in names):
        getter = _fields_getter(names)
        if len(names) == 1:
            return _constant(lambda view: (getter(view),))
        return _constant(getter)  # several fields: a tuple
    num_head = len(names)
    while num_head and names[num_head - 1] in VIEW_ATTRIBUTES:
        num_head -= 1
    fields = [KEY_FIELDS[name] for name in names[:num_head]]
    tail = names[num_head:]
    if num_head == 1 and len(tail) >= 2:
        # every policy's shape: one state-derived field, then view attributes
        first = fields[0]
        rest = _fields_getter(tail)  # a tuple: two fields or more
        if first is _queue_rank:  # vLLM's key, twice per work item: no call for the rank
            head = _QUEUE_RANK_HEADS.get
            return _constant(lambda view: head(view_lifecycle(view), _SUSPENDED_HEAD) + rest(view))
        return lambda state: lambda view: (first(state, view),) + rest(view)
    fields += [KEY_FIELDS[name] for name in tail]
    return lambda state: lambda view: tuple([field(state, view) for field in fields])


KeysOf = Callable[[list[RequestView]], list[tuple[object, ...]]]


def keys_function(names: tuple[str, ...], state: SchedulerState) -> KeysOf:
    """``views -> [key(view) for view in views]`` for :func:`key_function`'s
    key, the same tuples: the validator derives every work item's key once
    per decision, and the plan builder a run of decode rows' keys, at C
    speed (``map``) for the key shapes policies declare (view attributes
    only; ``queue_rank`` then at least two of them). Compiled once per key
    shape (:func:`_keys_maker`)."""
    return _keys_maker(names)(state)


@functools.lru_cache(maxsize=64)
def _keys_maker(names: tuple[str, ...]) -> Callable[[SchedulerState], KeysOf]:
    """``state -> keys`` for :func:`keys_function` (a pure function of ``names``)."""
    if len(names) >= 2 and all(name in VIEW_ATTRIBUTES for name in names):
        getter = _fields_getter(names)

        def attributes(views: list[RequestView]) -> list[tuple[object, ...]]:
            return list(map(getter, views))  # one attrgetter: a tuple already
        return _constant(attributes)
    tail = names[1:]
    if names[:1] == ("queue_rank",) and len(tail) >= 2 and all(
            name in VIEW_ATTRIBUTES for name in tail):
        rest = _fields_getter(tail)
        head = _QUEUE_RANK_HEADS.get

        def ranked(views: list[RequestView]) -> list[tuple[object, ...]]:
            # (rank,) + rest(view), joined by operator.add
            return list(map(operator.add, map(head, map(view_lifecycle, views),
                                              repeat(_SUSPENDED_HEAD)), map(rest, views)))
        return _constant(ranked)
    maker = _key_maker(names)

    def keys_of_state(state: SchedulerState) -> KeysOf:
        key_of = maker(state)
        return lambda views: list(map(key_of, views))
    return keys_of_state


_T = TypeVar("_T")


def _constant(made: _T) -> Callable[[SchedulerState], _T]:
    """A maker whose product does not read the state."""
    return lambda state: made
