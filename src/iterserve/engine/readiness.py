"""Readiness board: foreign facts to the views' ``is_ready`` (0x09B, 0x0C).

A request that needs remote K/V, a promotion or some layers is runnable only
when every required fact for its *current* binding (request id, generation,
suspension epoch) is READY. Facts for an old generation or epoch are stale
and never make work runnable. The board only publishes booleans into the
state; it never moves K/V (the foreign owners do).
"""

from __future__ import annotations

from collections.abc import Iterable

from iterserve.admission.binding import ForeignBinding
from iterserve.admission.readiness import ReadinessFact, ReadinessRequirement, is_runnable
from iterserve.records.state import SchedulerState
from iterserve.records.view import RequestView


def binding_of(view: RequestView) -> ForeignBinding:
    """The binding facts must name: generation and epoch, not the per-step
    snapshot version (which changes every iteration)."""
    return ForeignBinding(view.request_id, view.generation,
                          f"g{view.generation}-e{view.suspension_epoch}",
                          view.suspension_epoch)


class ReadinessBoard:
    def __init__(self) -> None:
        self._required: dict[str, tuple[ReadinessRequirement, ...]] = {}
        self._facts: dict[str, list[ReadinessFact]] = {}

    def require(self, request_id: str, requirements: Iterable[ReadinessRequirement]) -> None:
        self._required[request_id] = tuple(requirements)

    def publish(self, fact: ReadinessFact) -> None:
        """A later fact for the same binding and requirement replaces the earlier."""
        facts = self._facts.setdefault(fact.binding.request_id, [])
        facts[:] = [f for f in facts
                    if (f.binding, f.requirement) != (fact.binding, fact.requirement)]
        facts.append(fact)

    def forget(self, request_id: str) -> None:
        self._required.pop(request_id, None)
        self._facts.pop(request_id, None)

    def is_runnable(self, view: RequestView) -> bool:
        required = self._required.get(view.request_id, ())
        current = binding_of(view)
        now = (current.generation, current.suspension_epoch)
        facts = [f for f in self._facts.get(view.request_id, ())  # future facts wait their turn
                 if (f.binding.generation, f.binding.suspension_epoch) <= now]
        if not required and not facts:
            return True
        return is_runnable(current, facts, required)

    def readiness(self, state: SchedulerState) -> dict[str, bool]:
        """is_ready per tracked live request whose published flag is out of date."""
        changed = {}
        for rid in list(self._required) + [r for r in self._facts if r not in self._required]:
            view = state.views.get(rid)
            if view is None or view.lifecycle.is_terminal:
                continue
            ready = self.is_runnable(view)
            if ready != view.is_ready:
                changed[rid] = ready
        return changed
