"""ORCA's reservation as a published intent (0x03, 0x06).

ORCA Algorithm 1 keeps a scheduler-side counter n_rsrv: an INITIATION
request adds its max_tokens (prompt + declared maximum output) and is
selected only if n_rsrv stays within n_slots; a finished request releases
its reservation. The spec places that counter in the plan as a versioned
policy intent (``reservation_decisions``), not as allocator state: the
allocator still publishes physical feasibility. A plan carries one
:class:`ReservationDecision` per initiation it selects, in selection order,
and :func:`check_reservations` holds the chain to the state it was planned
from. The decisions stay off the decision log's wire form (a replay derives
them again with the plan).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from iterserve.records import errors as E
from iterserve.records.view import RequestView


@dataclass(frozen=True, slots=True)
class ReservationDecision:
    """``request_id:generation`` reserves ``max_tokens`` slots: n_rsrv goes
    from ``n_rsrv_before`` to ``n_rsrv_after`` against ``n_slots`` (None:
    unbounded)."""

    request_id: str
    generation: int
    max_tokens: int
    n_rsrv_before: int
    n_rsrv_after: int
    n_slots: int | None


def max_tokens(view: RequestView) -> int:
    """ORCA's per-request upper bound on total tokens after processing."""
    return view.num_prompt_tokens + view.max_output_tokens


def check_reservations(views: Mapping[str, RequestView], running: Iterable[str],
                       admitted: Iterable[tuple[str, int]],
                       decisions: tuple[ReservationDecision, ...]) -> None:
    """A plan's reservation decisions against its input state: the chain
    starts at the running requests' max_tokens, each decision adds its
    request's max_tokens and stays within n_slots, and the decisions name
    exactly the generations the plan admits. Raises
    :class:`~iterserve.records.errors.LedgerDrift` (the plan's reservation ledger drifts from its state)."""
    n_rsrv = sum(max_tokens(views[rid]) for rid in running)
    for decision in decisions:
        view = views.get(decision.request_id)
        if view is None or view.generation != decision.generation:
            raise E.LedgerDrift(f"reservation for {decision.request_id}:"
                                        f"{decision.generation}, not a live generation")
        expected = (max_tokens(view), n_rsrv, n_rsrv + max_tokens(view))
        got = (decision.max_tokens, decision.n_rsrv_before, decision.n_rsrv_after)
        if got != expected:
            raise E.LedgerDrift(
                f"{decision.request_id}: (max_tokens, n_rsrv before, after) {got}, "
                f"the state gives {expected}")
        if decision.n_slots is not None and decision.n_rsrv_after > decision.n_slots:
            raise E.LedgerDrift(f"{decision.request_id}: n_rsrv {decision.n_rsrv_after} "
                                        f"over n_slots {decision.n_slots}")
        n_rsrv = decision.n_rsrv_after
    reserved = [(d.request_id, d.generation) for d in decisions]
    if sorted(reserved) != sorted(admitted):
        raise E.LedgerDrift(f"reservations for {sorted(reserved)}, "
                                    f"the plan admits {sorted(admitted)}")
