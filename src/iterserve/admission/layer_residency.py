"""Layer-wise residency as a readiness horizon (0x09B, F64).

A layer-wise cache tier keeps ``resident[r, layer]`` instead of one
all-or-nothing residency per request. The memory ledger becomes F64:

    M_GPU = sum_r sum_(l=1..L) M_resident(r, l)

counting only layers whose fact is READY (an INFLIGHT layer is not yet
visible, a MISS layer is nowhere on the device).

M5.2's part is scheduling-side only: it decides whether a request's layers
are eligible for the next iteration and records, per layer, the readiness
deadline by which the layer must be resident (the moment that layer is
planned to execute). The tier (M5.5) owns the transfer; the scheduler
consumes its READY / INFLIGHT / MISS facts and predicted ready times. A
positive prediction never makes a layer visible: execution still waits for
READY (:mod:`iterserve.sim.layer_pipeline` measures the lateness).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


class LayerStatus(enum.Enum):
    READY = "ready"  # resident on the device now
    INFLIGHT = "inflight"  # a transfer is under way; predicted_ready_s says when
    MISS = "miss"  # not resident and nobody is fetching it


@dataclass(frozen=True, slots=True)
class LayerFact:
    """The tier's report for one (request, layer)."""

    request_id: str
    layer_index: int
    status: LayerStatus
    num_bytes: int  # the layer's K/V bytes for this request (M_resident when READY)
    predicted_ready_s: float | None = None  # INFLIGHT only: the tier's prediction

    def __post_init__(self) -> None:
        if self.layer_index < 0 or self.num_bytes < 0:
            raise ValueError(f"layer fact {self.request_id}/{self.layer_index}: layer_index "
                             f"and num_bytes must be >= 0")
        if (self.status is LayerStatus.INFLIGHT) != (self.predicted_ready_s is not None):
            raise ValueError(f"layer fact {self.request_id}/{self.layer_index}: "
                             "predicted_ready_s is given for INFLIGHT facts and only for them")


@dataclass(frozen=True, slots=True)
class LayerDeadline:
    """When layer ``layer_index`` of ``request_id`` must be resident: the
    planned start of that layer in the iteration (0x09B readiness deadline)."""

    request_id: str
    layer_index: int
    deadline_s: float
    predicted_ready_s: float | None  # None: READY at planning time

    @property
    def predicted_lateness_s(self) -> float:
        """How late the tier's prediction says the layer arrives (0 if on time)."""
        if self.predicted_ready_s is None:
            return 0.0
        return max(0.0, self.predicted_ready_s - self.deadline_s)


def gpu_resident_bytes(facts: Iterable[LayerFact]) -> int:
    """F64: M_GPU = sum over requests and layers of M_resident(r, l)."""
    return sum(fact.num_bytes for fact in facts if fact.status is LayerStatus.READY)


def planned_layer_starts_s(start_s: float, layer_compute_s: Sequence[float]) -> list[float]:
    """The planned start of every layer: start + the compute of the layers before it."""
    if any(c < 0 for c in layer_compute_s):
        raise ValueError("layer compute times must be >= 0")
    return [start_s + before for before in itertools.accumulate(layer_compute_s[:-1], initial=0.0)]


def is_eligible(facts: Sequence[LayerFact], num_layers: int) -> bool:
    """A request may be planned when every layer is READY or INFLIGHT (its
    transfer is under way and gets a deadline); one MISS layer, or a layer
    without a fact, makes it ineligible: nobody will make that layer visible."""
    by_layer = {fact.layer_index: fact for fact in facts}
    return all(layer in by_layer and by_layer[layer].status is not LayerStatus.MISS
               for layer in range(num_layers))


def readiness_deadlines(facts: Sequence[LayerFact], start_s: float,
                        layer_compute_s: Sequence[float]) -> tuple[LayerDeadline, ...]:
    """The deadline of every layer of an eligible request for an iteration
    that starts at ``start_s`` with these per-layer compute times."""
    if not is_eligible(facts, len(layer_compute_s)):
        raise ValueError("readiness deadlines are recorded for eligible requests only")
    by_layer = {fact.layer_index: fact for fact in facts}
    starts = planned_layer_starts_s(start_s, layer_compute_s)
    return tuple(LayerDeadline(by_layer[layer].request_id, layer, starts[layer],
                               by_layer[layer].predicted_ready_s)
                 for layer in range(len(layer_compute_s)))
