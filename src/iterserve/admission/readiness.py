"""Readiness: foreign facts, the runnable conjunction and the board (0x09B, 0x0C).

The one home of readiness. Foreign owners publish facts; the board turns
them into the views' ``is_ready`` flags (through
:func:`iterserve.records.transition.with_readiness`).

A suspended request is runnable only when every required foreign fact for
its *current* binding is READY: exact-but-not-resident, promoted-to-a-stale-
worker or all-but-one-layer-ready are all "not runnable". The scheduler
consumes these facts; it never performs the transfer, promotion or placement.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from dataclasses import dataclass

from iterserve.records.dependencies import ReadinessDependency
from iterserve.records.plan import IterationPlan
from iterserve.records.receipts import ForeignBinding, Staleness, binding_of, staleness
from iterserve.records.state import SchedulerState
from iterserve.records.view import Lifecycle, RequestView


class ReadinessKind(enum.Enum):
    REMOTE_KV = "remote_kv"  # connector-backed K/V arriving from elsewhere
    PROMOTION = "promotion"  # M5.5 tier promotion of preserved K/V
    LAYERS = "layers"  # one layer's cache resident (0x09B); carries layer_index
    ALLOCATION = "allocation"  # M5.3 blocks allocated for the resumed rows
    PLACEMENT = "placement"  # M5.6 worker placement


class ReadinessStatus(enum.Enum):
    PENDING = "pending"
    READY = "ready"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ReadinessRequirement:
    """One fact a resume needs; LAYERS requirements name their layer."""

    kind: ReadinessKind
    layer_index: int | None = None

    def __post_init__(self) -> None:
        _check_layer(self.kind, self.layer_index)


@dataclass(frozen=True, slots=True)
class ReadinessFact:
    """A foreign owner's report for one requirement under one binding."""

    kind: ReadinessKind
    binding: ForeignBinding
    status: ReadinessStatus
    layer_index: int | None = None

    def __post_init__(self) -> None:
        _check_layer(self.kind, self.layer_index)

    @property
    def requirement(self) -> ReadinessRequirement:
        return ReadinessRequirement(self.kind, self.layer_index)


def current_facts(binding: ForeignBinding,
                  facts: Iterable[ReadinessFact]) -> tuple[ReadinessFact, ...]:
    """Facts bound to exactly ``binding``; other requests' and stale facts are dropped."""
    return tuple(fact for fact in facts if fact.binding.request_id == binding.request_id
                 and staleness(fact.binding, binding) is Staleness.CURRENT)


def unmet_requirements(binding: ForeignBinding, facts: Iterable[ReadinessFact],
                       required: Iterable[ReadinessRequirement] = ()
                       ) -> tuple[ReadinessRequirement, ...]:
    """Requirements without a current READY fact, plus any current fact not READY."""
    current = current_facts(binding, facts)
    ready = {f.requirement for f in current if f.status is ReadinessStatus.READY}
    unmet = {f.requirement for f in current if f.status is not ReadinessStatus.READY}
    unmet.update(r for r in required if r not in ready)
    return tuple(sorted(unmet, key=lambda r: (r.kind.value, r.layer_index or 0)))


def is_runnable(binding: ForeignBinding, facts: Iterable[ReadinessFact],
                required: Iterable[ReadinessRequirement] = ()) -> bool:
    """True only when every required fact for the current binding is READY (0x0C)."""
    return not unmet_requirements(binding, facts, required)


def _check_layer(kind: ReadinessKind, layer_index: int | None) -> None:
    if (kind is ReadinessKind.LAYERS) != (layer_index is not None):
        raise ValueError("layer_index is required for LAYERS facts and only for them")
    if layer_index is not None and layer_index < 0:
        raise ValueError(f"layer_index must be >= 0, got {layer_index}")


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

    def dependencies(self, view: RequestView) -> tuple[ReadinessDependency, ...]:
        """The READY facts ``view``'s next row depends on (0x01A): its
        required facts current for its binding, in requirement order."""
        required = self._required.get(view.request_id, ())
        if not required:
            return ()
        current = binding_of(view)
        ready = {f.requirement: f for f in current_facts(current, self._facts.get(
            view.request_id, ())) if f.status is ReadinessStatus.READY}
        return tuple(ReadinessDependency(r.kind.value, r.layer_index, ready[r].binding)
                     for r in required if r in ready)

    def bind_dependencies(self, plan: IterationPlan, state: SchedulerState) -> IterationPlan:
        """``plan`` with the readiness dependencies bound of each selected
        row that consumes its facts: the row of a request not yet running
        (admitted or resumed by this plan). A running request consumed them
        when it was admitted and its snapshot has moved on since (0x0C)."""
        if not self._required:
            return plan
        views = state.views
        bound = tuple((item.request_id, needs) for item in plan.work
                      if item.request_id in self._required
                      and views[item.request_id].lifecycle is not Lifecycle.RUNNING
                      and (needs := self.dependencies(views[item.request_id])))
        return dataclasses.replace(plan, dependencies=bound) if bound else plan

    def readiness(self, state: SchedulerState) -> dict[str, bool]:
        """is_ready per tracked live request whose published flag is out of date.

        A running request is left alone: it consumed its facts when it was
        admitted or resumed, and the facts bind the snapshot it had then
        (the digest moves with every output it emits, 0x0C)."""
        changed = {}
        for rid in list(self._required) + [r for r in self._facts if r not in self._required]:
            view = state.views.get(rid)
            if view is None or view.lifecycle.is_terminal or view.lifecycle is Lifecycle.RUNNING:
                continue
            ready = self.is_runnable(view)
            if ready != view.is_ready:
                changed[rid] = ready
        return changed
