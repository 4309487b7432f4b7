"""The arrival-gate protocol (0x07): the one shape an overload contract has.

The engine loop calls a gate on each arrival; the concrete gates live in
``admission/overload.py``. The protocol sits here, below the engine, so the
engine depends on admission and never the other way round.
"""

from __future__ import annotations

from typing import Protocol

from iterserve.records.spec import RequestSpec
from iterserve.records.state import SchedulerState


class ArrivalGate(Protocol):
    """An overload contract applied at arrival (0x07): None admits the
    request to the waiting queue, a reason string rejects it. Pure: the
    decision depends only on the spec and the published state."""

    gate_id: str

    def screen(self, spec: RequestSpec, state: SchedulerState) -> str | None: ...
