"""Readiness dependencies a selected row binds (0x01A, 0x0C).

A selected row names its request generation, snapshot version and interval
and also the foreign facts (remote K/V, promotion, layer residency,
allocation, placement) that made it runnable: each a
:class:`ReadinessDependency`, READY for the request's binding (generation,
snapshot digest, suspension epoch) when the plan was made. The engine binds
them from its readiness board after the policy chooses; validation refuses a
plan whose row depends on a fact for another binding, and a dependency of a
request the plan does not select. They stay off the decision log's wire
form (the readiness facts are the engine's, not the log's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from iterserve.records import errors as E
from iterserve.records.receipts import ForeignBinding, binding_of
from iterserve.records.view import RequestView


@dataclass(frozen=True, slots=True)
class ReadinessDependency:
    """One READY foreign fact a row depends on: its kind (a readiness kind's
    value), the layer for a per-layer fact, and the binding it was READY for."""

    kind: str
    layer_index: int | None
    binding: ForeignBinding


def check_dependencies(views: Mapping[str, RequestView], selected: set[str],
                       dependencies: tuple[tuple[str, tuple[ReadinessDependency, ...]], ...]
                       ) -> None:
    """Every dependency belongs to a selected row and is bound to its
    request's current binding; raises
    :class:`~iterserve.records.errors.NotReady` otherwise (a fact for another
    binding makes nothing runnable)."""
    for rid, needs in dependencies:
        if rid not in selected:
            raise E.NotReady(f"{rid}: readiness dependencies for a row the plan does not select")
        current = binding_of(views[rid])
        for need in needs:
            if need.binding != current:
                raise E.NotReady(f"{rid}: depends on {need.kind} READY for {need.binding}, "
                                 f"its binding is {current}")
