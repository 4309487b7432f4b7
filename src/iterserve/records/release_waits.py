"""The bound on 0x06's TEMPORARILY_UNAVAILABLE wait.

A running request short of blocks that blocks whose release is in flight
cover waits, holding its blocks, with no victim (0x06: "wait under declared
SLO policy"). The declared part is the run's ``kv.extension_wait_max_iterations``
(N): a plan that waits a request lists it in ``IterationPlan.release_waits``;
the transition counts, per request, the consecutive decisions whose plan
waited it (:func:`next_release_waits`, the state's ``release_waits``); once a
request has waited N of them, the next plan treats it as FAILED and runs the
shared preemption step (its victim record names the bound and the count).
A release that never lands therefore holds a request's blocks for N
decisions at most.

The count lives in the published state, derived from published plans, so
replay re-derives it and the validator can refuse a plan that waits past it
(:func:`check_release_waits`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from iterserve.records import errors as E
from iterserve.records.view import Lifecycle, RequestView


def next_release_waits(previous: Mapping[str, int], waited: Sequence[str]) -> dict[str, int]:
    """The successor's counts: one more for each request the plan waited,
    none for any other (the count is of consecutive decisions)."""
    if not waited:  # the common case: no release in flight
        return {}
    return {rid: previous.get(rid, 0) + 1 for rid in waited}


def check_release_waits(views: Mapping[str, RequestView], counts: Mapping[str, int],
                        num_blocks_pending_release: int, max_waits: int,
                        waited: Sequence[str], named: set[str]) -> None:
    """A plan may wait only running requests it gives no work and names in
    no intent (``named``), once each, while a release is in flight, and
    only one that has waited fewer than ``max_waits`` decisions: past the
    bound the wait is FAILED (0x06)."""
    if waited and not num_blocks_pending_release:
        raise E.IllegalIntent(f"release wait of {waited[0]} with no release in flight")
    seen: set[str] = set()
    for rid in waited:
        view = views.get(rid)
        if view is None or view.lifecycle is not Lifecycle.RUNNING:
            raise E.IllegalIntent(f"release wait of {rid}, which is not running")
        if rid in named or rid in seen:
            raise E.IllegalIntent(f"{rid} waits on a release and has other work or intents")
        seen.add(rid)
        if counts.get(rid, 0) >= max_waits:
            raise E.IllegalIntent(f"{rid} has waited {counts[rid]} decisions on a release, the "
                                  f"bound (kv.extension_wait_max_iterations={max_waits}): "
                                  f"it is FAILED, not waiting")
