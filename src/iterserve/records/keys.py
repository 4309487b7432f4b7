"""The vocabulary of tie-break key fields (0x01A "tie-break evidence").

A policy declares its ordering key as a tuple of field names from this
registry and records each work item's key values. Because every field is
recomputable from the published state, the validator can replay the
evidence; a name outside the registry is rejected rather than trusted.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from itertools import repeat

from iterserve.records.frontier import phase_rank
from iterserve.records.state import SchedulerState
from iterserve.records.view import Lifecycle, RequestView

KeyField = Callable[[SchedulerState, RequestView], object]


def _phase_rank(state: SchedulerState, view: RequestView) -> int:
    """Decode rows 0, rebuild 1, prefill 2: decode-first phase order."""
    return phase_rank(view.num_prompt_tokens, view.num_emitted, view.num_computed)


#: ``queue_rank`` by lifecycle: running 0, waiting 2, any other (suspended) 1
_QUEUE_RANKS = {Lifecycle.RUNNING: 0, Lifecycle.WAITING: 2}
_SUSPENDED_RANK = 1


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


#: Key fields that are plain view attributes: read with one C-level attrgetter.
VIEW_ATTRIBUTES: dict[str, str] = {
    "priority_rank": "priority",
    "arrival": "arrival",
    "arrival_order": "arrival_order",
    "request_id": "request_id",
    "request_generation": "generation",
    "client_id": "client_id",
}

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

    Keys made only of view attributes compile to one attrgetter (hot path).
    """
    if names and all(name in VIEW_ATTRIBUTES for name in names):
        getter = operator.attrgetter(*(VIEW_ATTRIBUTES[name] for name in names))
        if len(names) == 1:
            return lambda view: (getter(view),)
        return getter
    num_head = len(names)
    while num_head and names[num_head - 1] in VIEW_ATTRIBUTES:
        num_head -= 1
    fields = [KEY_FIELDS[name] for name in names[:num_head]]
    tail = names[num_head:]
    if num_head == 1 and len(tail) >= 2:
        # every policy's shape: one state-derived field, then view attributes
        first = fields[0]
        rest = operator.attrgetter(*(VIEW_ATTRIBUTES[name] for name in tail))
        if first is _queue_rank:  # vLLM's key, twice per work item: no call for the rank
            rank = _QUEUE_RANKS.get
            return lambda view: (rank(view.lifecycle, _SUSPENDED_RANK), *rest(view))
        return lambda view: (first(state, view), *rest(view))
    fields += [KEY_FIELDS[name] for name in tail]
    return lambda view: tuple([field(state, view) for field in fields])


KeysOf = Callable[[list[RequestView]], list[tuple[object, ...]]]
_LIFECYCLE = operator.attrgetter("lifecycle")


def keys_function(names: tuple[str, ...], state: SchedulerState) -> KeysOf:
    """``views -> [key(view) for view in views]`` for :func:`key_function`'s
    key, the same tuples: the validator derives every work item's key once
    per decision, at C speed (``map``) for the key shapes policies declare
    (view attributes only; ``queue_rank`` then at least two of them)."""
    key_of = key_function(names, state)
    if len(names) >= 2 and all(name in VIEW_ATTRIBUTES for name in names):
        return lambda views: list(map(key_of, views))  # one attrgetter: a tuple already
    tail = names[1:]
    if names[:1] == ("queue_rank",) and len(tail) >= 2 and all(
            name in VIEW_ATTRIBUTES for name in tail):
        rest = operator.attrgetter(*(VIEW_ATTRIBUTES[name] for name in tail))
        rank = _QUEUE_RANKS.get
        # (rank,) + rest(view): zip makes the 1-tuples, operator.add joins them
        return lambda views: list(map(operator.add, zip(map(
            rank, map(_LIFECYCLE, views), repeat(_SUSPENDED_RANK))), map(rest, views)))
    return lambda views: list(map(key_of, views))
