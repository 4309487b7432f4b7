"""Layer offload on the simulated clock (0x09B, F64): iterations wait for
layer readiness.

:class:`LayerOffloadCost` wraps the run's clocked cost. Each iteration's
predicted compute is split evenly over ``num_layers`` layers. The last
``num_offloaded`` layers live on the host and are fetched again for every
iteration, over one link. The iteration lasts as long as
:func:`~iterserve.sim.layer_pipeline.run_layer_pipeline` says: its compute
plus every stall spent waiting for a layer. So readiness stalls move the
run's clock, and with it TTFT, TBT and every later arrival's wait. Each
iteration's layer timings are added to a
:class:`~iterserve.sim.layer_pipeline.LayerTally` (what ``summarize`` reads,
8 bytes an iteration a layer).

Only on the ``ms`` clock: on the ``iteration`` clock one iteration is one
unit whatever it holds, so a stall could not show.

``iterserve simulate --layer-offload LAYERS,OFFLOADED,TRANSFER_MS`` turns it
on (:func:`parse_layer_offload`); the decision log's header records the
settings (:meth:`LayerOffload.to_json`, :func:`offload_from_json`) so replay
re-runs the same clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from iterserve.cost import ClockedCost, CostModelError
from iterserve.cost.protocol import MS_PER_S
from iterserve.records.plan import IterationPlan
from iterserve.records.state import SchedulerState
from iterserve.sim.layer_pipeline import LayerTally, run_layer_pipeline


@dataclass(frozen=True, slots=True)
class LayerOffload:
    num_layers: int
    num_offloaded: int  # the last layers, fetched from the host for every iteration
    transfer_ms: float  # one offloaded layer's transfer on the link

    def __post_init__(self) -> None:
        if self.num_layers < 1 or not 0 <= self.num_offloaded <= self.num_layers:
            raise ValueError(f"layer offload: need 1 <= layers and 0 <= offloaded <= layers, "
                             f"got {self.num_layers} layers, {self.num_offloaded} offloaded")
        if not (math.isfinite(self.transfer_ms) and self.transfer_ms >= 0):
            raise ValueError(f"layer offload: transfer_ms must be finite and >= 0, "
                             f"got {self.transfer_ms}")

    def transfers_s(self) -> list[float]:
        resident = self.num_layers - self.num_offloaded
        return [0.0] * resident + [self.transfer_ms / MS_PER_S] * self.num_offloaded

    def to_json(self) -> dict[str, Any]:
        return {"num_layers": self.num_layers, "num_offloaded": self.num_offloaded,
                "transfer_ms": self.transfer_ms}


FLAG_FORMAT = "LAYERS,OFFLOADED,TRANSFER_MS"


def parse_layer_offload(text: str) -> LayerOffload:
    """``LAYERS,OFFLOADED,TRANSFER_MS`` (e.g. ``32,8,0.4``); ValueError, one
    line naming the problem, for anything else."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) != 3:
        raise ValueError(f"expected {FLAG_FORMAT}, got {text!r}")
    try:
        layers, offloaded = int(parts[0]), int(parts[1])
    except ValueError:
        raise ValueError(f"LAYERS and OFFLOADED must be integers, got {text!r}") from None
    try:
        transfer_ms = float(parts[2])
    except ValueError:
        raise ValueError(f"TRANSFER_MS must be a number, got {parts[2]!r}") from None
    return LayerOffload(layers, offloaded, transfer_ms)


def offload_from_json(record: Mapping[str, Any]) -> LayerOffload:
    """The inverse of :meth:`LayerOffload.to_json`; ValueError naming a bad field."""
    if not isinstance(record, Mapping) or set(record) != {"num_layers", "num_offloaded",
                                                           "transfer_ms"}:
        raise ValueError("must be an object with num_layers, num_offloaded, transfer_ms")
    layers, offloaded, transfer = (record["num_layers"], record["num_offloaded"],
                                   record["transfer_ms"])
    if not all(type(value) is int for value in (layers, offloaded)):
        raise ValueError("num_layers and num_offloaded must be integers")
    if type(transfer) not in (int, float):
        raise ValueError("transfer_ms must be a number")
    return LayerOffload(layers, offloaded, float(transfer))


class LayerOffloadCost(ClockedCost):
    """``inner``'s durations stretched by layer-readiness stalls."""

    __slots__ = ("offload", "tally")

    def __init__(self, inner: ClockedCost, offload: LayerOffload) -> None:
        if inner.clock != "ms":
            raise CostModelError("layer offload needs a workload on the ms clock (on the "
                                 "iteration clock an iteration lasts one unit, stalls or not)")
        super().__init__(inner.model, inner.clock)
        self.offload = offload
        self.tally = LayerTally()

    def iteration_duration(self, plan: IterationPlan, state: SchedulerState) -> float:
        compute_ms = super().iteration_duration(plan, state)
        layers = self.offload.num_layers
        run = run_layer_pipeline(state.now / MS_PER_S, [compute_ms / MS_PER_S / layers] * layers,
                                 self.offload.transfers_s())
        self.tally.add(run)
        return (run.finish_s - run.start_s) * MS_PER_S
