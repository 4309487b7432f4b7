"""The log-format-4 state digest written out over every view: the oracle
:class:`iterserve.records.state_digest.StateDigester` (the product's one
implementation, incremental over the views that changed) is tested against."""

from __future__ import annotations

import hashlib
from typing import Any

from iterserve.records.codec import (
    dumps,
    multiset_element,
    multiset_hex,
    pair_element,
    state_fields_to_json,
    view_to_json,
)
from iterserve.records.state import SchedulerState
from iterserve.records.view import Lifecycle


def state_digest(state: SchedulerState) -> str:
    """The state digest of decision-log format 4, which binds a log line to
    its state: sha256 of the canonical text of :func:`state_digest_record`.
    Every view encoded, at every call."""
    return hashlib.sha256(dumps(state_digest_record(state)).encode()).hexdigest()


def state_digest_record(state: SchedulerState) -> dict[str, Any]:
    """:func:`state_to_json` with ``views`` replaced by ``{"others": H,
    "running": [...]}``: the RUNNING views (which change at every decision)
    in request-id order, and H the additive multiset hash of every other
    view (:func:`multiset_hex` of the sum of :func:`multiset_element`), and
    ``waiting`` by :func:`waiting_to_json`. Views are keyed by unique ids,
    so the multiset and the running list determine the views: the digest is
    still a function of the whole state, and a waiting view that did not
    change costs nothing to carry."""
    views = state.views
    running: list[list[Any]] = []
    others = 0
    for rid in sorted(views):
        row = view_to_json(views[rid])
        if views[rid].lifecycle is Lifecycle.RUNNING:
            running.append(row)
        else:
            others += multiset_element(dumps(row).encode())
    return state_fields_to_json(state, {"others": multiset_hex(others), "running": running},
                                waiting_to_json(state.waiting))


def waiting_to_json(waiting: tuple[str, ...]) -> dict[str, Any]:
    """The waiting queue in a format-4 digest: ``{"num_ids": n, "pairs":
    H}``, H the additive multiset hash (:func:`multiset_hex`) of
    :func:`pair_element` over the neighbour pairs of ``[null, *waiting,
    null]``. Following the pairs from ``null`` gives the queue back when
    its ids are distinct (a valid state's are), and an admission or an
    arrival changes two or three pairs, not the queue's whole text."""
    padded = (None, *waiting, None)
    total = sum(map(pair_element, padded[:-1], padded[1:]))
    return {"num_ids": len(waiting), "pairs": multiset_hex(total)}


