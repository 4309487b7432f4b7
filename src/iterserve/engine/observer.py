"""Engine observers: they see every fact the loop publishes and change none.

Subclass :class:`EngineObserver` and override what you need. Observers write
decision logs, traces and metric event logs.
"""

from __future__ import annotations

from collections.abc import Mapping

from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.spec import RequestSpec
from iterserve.records.state import SchedulerState


class EngineObserver:
    def on_arrival(self, spec: RequestSpec, now: float) -> None:
        """A request reached the system and entered the waiting queue."""

    def on_reject(self, spec: RequestSpec, reason: str, now: float) -> None:
        """The arrival gate refused a request: an outcome, never a silent drop."""

    def on_cancel(self, request_id: str, state: SchedulerState, successor: SchedulerState) -> None:
        """A client cancelled; ``successor`` holds the new generation."""

    def on_readiness(self, changed: Mapping[str, bool], successor: SchedulerState) -> None:
        """Live requests' readiness flags changed at ``successor.now`` (0x0C):
        ``changed`` holds only the requests whose flag flipped, each with its
        new value; ``successor`` is the state that publishes them."""

    def on_step(
        self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
        successor: SchedulerState,
    ) -> None:
        """One decision completed: plan chosen, executed and published."""
