"""0x03: ORCA's n_rsrv is a record the plan publishes, one per initiation,
and validation holds it to the state. The fixture is test_orca's (n_slots
20): R (max_tokens 2 + 8 = 10) is admitted alone at decision 0:
n_rsrv 0 -> 10. O (4 + 12 = 16) cannot join it (26 > 20) and Y (1 + 4 = 5)
may not pass O; R finishes, O is admitted with n_rsrv 0 -> 16, and Y only
after O leaves: 0 -> 5. Every figure is worked by hand from the specs."""

from __future__ import annotations

import dataclasses

import pytest
from test_orca import N_SLOTS, OLD, RUN, YOUNG, orca_run

from iterserve.records.errors import LedgerDrift
from iterserve.records.reservation import ReservationDecision
from iterserve.records.spec import Capacity, OnlineWorkload
from iterserve.records.validate import validate_plan


def _reservations(recorder) -> list[tuple[int, ReservationDecision]]:  # type: ignore[no-untyped-def]
    return [(state.decision_id, decision) for state, plan, _, _ in recorder.steps
            for decision in plan.reservations]


def test_each_initiation_publishes_its_reservation_with_the_plan() -> None:
    recorder = orca_run([RUN, OLD, YOUNG])
    decisions = [decision for _, decision in _reservations(recorder)]
    assert decisions == [
        ReservationDecision("R", 0, 10, 0, 10, N_SLOTS),
        ReservationDecision("O", 0, 16, 0, 16, N_SLOTS),
        ReservationDecision("Y", 0, 5, 0, 5, N_SLOTS),
    ]
    admitted = {intent.request_id for _, plan, _, _ in recorder.steps for intent in plan.intents
                if intent.kind.value == "admit"}
    assert admitted == {"R", "O", "Y"}


def test_two_initiations_in_one_plan_chain_their_reservations() -> None:
    """R and Y arrive together (R first): 0 -> 10 -> 15 within 20."""
    recorder = orca_run([RUN, dataclasses.replace(YOUNG, arrival=0.0)])
    first = [d for decision_id, d in _reservations(recorder) if decision_id == 0]
    assert first == [ReservationDecision("R", 0, 10, 0, 10, N_SLOTS),
                     ReservationDecision("Y", 0, 5, 10, 15, N_SLOTS)]


@pytest.mark.parametrize("forge", [
    lambda d: dataclasses.replace(d, n_rsrv_before=3),  # not the running requests' sum
    lambda d: dataclasses.replace(d, max_tokens=9, n_rsrv_after=9),  # not p + max_output
    lambda d: dataclasses.replace(d, n_slots=9),  # over n_slots
    lambda d: dataclasses.replace(d, request_id="Y"),  # a request the plan does not admit
])
def test_a_forged_reservation_is_refused(forge) -> None:  # type: ignore[no-untyped-def]
    recorder = orca_run([RUN, OLD, YOUNG])
    state, plan, _, _ = next(step for step in recorder.steps if step[1].reservations)
    workload = OnlineWorkload("orca-break", "iteration", Capacity(16, 8), ())  # no policy bound
    forged = dataclasses.replace(plan, reservations=(forge(plan.reservations[0]),))
    validate_plan(workload, state, plan)
    with pytest.raises(LedgerDrift):
        validate_plan(workload, state, forged)
