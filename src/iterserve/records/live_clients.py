"""The clients with a live request, kept by the transitions (0x09A at scale).

The fairness ledger asks at every decision which clients have a live
(waiting, running or suspended) request; read off the queues that costs
O(live), the waiting queue included. A state whose policy keeps a ledger
carries :class:`LiveClients`: live requests per client, updated from the
ids that arrived and the ids that became terminal. Like a
:class:`~iterserve.records.rows_bound.RowsBound` it is tied, by identity,
to the queues it was counted over: a state whose queues were swapped under
it (``dataclasses.replace``) or a state built without one is counted again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from operator import is_

from iterserve.records.view import RequestView


@dataclass(frozen=True, slots=True)
class LiveClients:
    """``counts[client]``: live requests of each client with one (> 0), and
    ``not_ready[client]``: how many of them are not ready (> 0; blocked on
    a foreign fact), over the ``queues`` (waiting, running, suspended)
    these objects are."""

    queues: tuple[object, object, object] = field(repr=False, compare=False)
    counts: Mapping[str, int]
    not_ready: Mapping[str, int]

    def holds_for(self, queues: tuple[object, object, object]) -> bool:
        return all(map(is_, self.queues, queues))

    def blocked(self) -> set[str]:
        """Clients whose live requests are all not ready: blocked on foreign
        readiness, not eligible (F63)."""
        counts = self.counts
        return {client for client, num in self.not_ready.items() if num == counts[client]}


def counted(views: Mapping[str, RequestView],
            queues: tuple[Iterable[str], Iterable[str], Iterable[str]]) -> LiveClients:
    """Read off every queue (the full count)."""
    counts: dict[str, int] = {}
    not_ready: dict[str, int] = {}
    for queue in queues:
        for rid in queue:
            view = views[rid]
            _add(counts, view.client_id, 1)
            if not view.is_ready:
                _add(not_ready, view.client_id, 1)
    return LiveClients(queues, counts, not_ready)


def carried(old: LiveClients, views: Mapping[str, RequestView],
            queues: tuple[object, object, object], *, entered: Iterable[str] = (),
            left: Iterable[str] = (), flipped: Iterable[str] = ()) -> LiveClients:
    """``old`` with the requests that ``entered`` (arrivals) counted, those
    that ``left`` (became terminal) uncounted and those whose ready flag
    ``flipped`` recounted; ``views`` (the new state's) holds them all."""
    counts, not_ready = dict(old.counts), dict(old.not_ready)
    for rid in entered:
        view = views[rid]
        _add(counts, view.client_id, 1)
        if not view.is_ready:
            _add(not_ready, view.client_id, 1)
    for rid in left:
        view = views[rid]
        _add(counts, view.client_id, -1)
        if not view.is_ready:
            _add(not_ready, view.client_id, -1)
    for rid in flipped:
        view = views[rid]
        _add(not_ready, view.client_id, -1 if view.is_ready else 1)
    return LiveClients(queues, counts, not_ready)


def _add(counts: dict[str, int], client: str, step: int) -> None:
    num = counts.get(client, 0) + step
    if num:
        counts[client] = num
    else:
        del counts[client]
