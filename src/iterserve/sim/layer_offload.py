"""Layer offload on the simulated clock (0x09B, F64): iterations wait for
layer readiness.

:class:`LayerOffloadCost` wraps the run's clocked cost. Each iteration's
predicted compute is split evenly over ``num_layers`` layers. The last
``num_offloaded`` layers live on the host and are fetched again for every
iteration, over one link. The iteration lasts as long as
:func:`~iterserve.sim.layer_pipeline.run_layer_pipeline` says: its compute
plus every stall spent waiting for a layer. So readiness stalls move the
run's clock, and with it TTFT, TBT and every later arrival's wait. Each
iteration's layer timings are kept for :func:`summarize`.

Only on the ``ms`` clock: on the ``iteration`` clock one iteration is one
unit whatever it holds, so a stall could not show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from iterserve.cost import ClockedCost, CostModelError
from iterserve.cost.protocol import MS_PER_S
from iterserve.records.plan import IterationPlan
from iterserve.records.state import SchedulerState
from iterserve.sim.layer_pipeline import IterationLayers, run_layer_pipeline


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


class LayerOffloadCost(ClockedCost):
    """``inner``'s durations stretched by layer-readiness stalls."""

    __slots__ = ("offload", "iterations")

    def __init__(self, inner: ClockedCost, offload: LayerOffload) -> None:
        if inner.clock != "ms":
            raise CostModelError("layer offload needs a workload on the ms clock (on the "
                                 "iteration clock an iteration lasts one unit, stalls or not)")
        super().__init__(inner.model, inner.clock)
        self.offload = offload
        self.iterations: list[IterationLayers] = []

    def iteration_duration(self, plan: IterationPlan, state: SchedulerState) -> float:
        compute_ms = super().iteration_duration(plan, state)
        layers = self.offload.num_layers
        run = run_layer_pipeline(state.now / MS_PER_S, [compute_ms / MS_PER_S / layers] * layers,
                                 self.offload.transfers_s())
        self.iterations.append(run)
        return (run.finish_s - run.start_s) * MS_PER_S
