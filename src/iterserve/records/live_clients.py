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

from iterserve.records.view import RequestView


@dataclass(frozen=True, slots=True)
class LiveClients:
    """``counts[client]``: live requests of each client with one (> 0), over
    the ``queues`` (waiting, running, suspended) these objects are."""

    queues: tuple[object, object, object] = field(repr=False, compare=False)
    counts: Mapping[str, int]

    def holds_for(self, queues: tuple[object, object, object]) -> bool:
        return all(map(_is, self.queues, queues))


def _is(a: object, b: object) -> bool:
    return a is b


def counted(views: Mapping[str, RequestView], queues: tuple[Iterable[str], ...]) -> dict[str, int]:
    """Live requests per client, read off every queue (the full count)."""
    counts: dict[str, int] = {}
    for queue in queues:
        for rid in queue:
            client = views[rid].client_id
            counts[client] = counts.get(client, 0) + 1
    return counts


def carried(old: Mapping[str, int], views: Mapping[str, RequestView],
            entered: Iterable[str], left: Iterable[str],
            queues: tuple[object, object, object]) -> LiveClients:
    """``old`` with the requests that ``entered`` (arrivals) counted and
    those that ``left`` (became terminal) uncounted; ``views`` holds both."""
    counts = dict(old)
    for rid in entered:
        client = views[rid].client_id
        counts[client] = counts.get(client, 0) + 1
    for rid in left:
        client = views[rid].client_id
        remaining = counts[client] - 1
        if remaining:
            counts[client] = remaining
        else:
            del counts[client]
    return LiveClients(queues, counts)
