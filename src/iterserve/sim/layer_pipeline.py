"""A simulated layer pipeline: per-layer readiness, lateness and stalls (0x09B).

One iteration runs its layers in order. A layer already resident is ready
at the iteration start; an offloaded one is prefetched over one serial
host link, its transfer issued when the layer before it starts computing
(layer 0's at the iteration start), as in 0x09B's "while layer l computes,
prefetch K/V needed by layer l+1". A layer executes only once its K/V is
resident, never on a prediction:

    start_l  = max(finish_(l-1), ready_l)       finish_l = start_l + compute_l

Measured, as 0x09B asks of the runtime: per-layer lateness against the
readiness deadline (the planned start, :func:`planned_layer_starts_s`),
the stall each layer adds, transfer time overlapped with compute, and the
number of iterations delayed by cache readiness. Times are in seconds of
the simulated clock; nothing here is calibrated against a real tier.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from iterserve.admission.layer_residency import planned_layer_starts_s


@dataclass(frozen=True, slots=True)
class LayerTiming:
    layer_index: int
    deadline_s: float  # the planned start: when the layer had to be resident
    ready_s: float  # when its K/V became resident
    start_s: float
    finish_s: float
    stall_s: float  # start - finish of the layer before (0 when the data was there)

    @property
    def lateness_s(self) -> float:
        """Prefetch lateness: how far past its deadline the layer became ready."""
        return max(0.0, self.ready_s - self.deadline_s)


@dataclass(frozen=True, slots=True)
class IterationLayers:
    start_s: float
    layers: tuple[LayerTiming, ...]
    transfer_s: float  # total transfer time on the link
    overlap_s: float  # transfer time during which a layer computed

    @property
    def finish_s(self) -> float:
        return self.layers[-1].finish_s if self.layers else self.start_s

    @property
    def delay_s(self) -> float:
        """Finish past the all-resident finish: the sum of the stalls."""
        return sum(layer.stall_s for layer in self.layers)

    @property
    def is_delayed(self) -> bool:
        return self.delay_s > 0.0


def run_layer_pipeline(start_s: float, compute_s: Sequence[float],
                       transfer_s: Sequence[float]) -> IterationLayers:
    """One iteration; ``transfer_s[l]`` is 0 for a resident layer, else the
    time its prefetch takes on the link."""
    if len(compute_s) != len(transfer_s) or any(t < 0 for t in transfer_s):
        raise ValueError("one compute time and one transfer time >= 0 per layer")
    deadlines = planned_layer_starts_s(start_s, compute_s)
    link_free_s, previous_start_s, previous_finish_s = start_s, start_s, start_s
    layers: list[LayerTiming] = []
    transfers: list[tuple[float, float]] = []
    for layer, (compute, transfer) in enumerate(zip(compute_s, transfer_s, strict=True)):
        ready_s = start_s
        if transfer > 0:
            issue_s = max(link_free_s, previous_start_s)
            ready_s = link_free_s = issue_s + transfer
            transfers.append((issue_s, ready_s))
        begin_s = max(previous_finish_s, ready_s)
        layers.append(LayerTiming(layer, deadlines[layer], ready_s, begin_s, begin_s + compute,
                                  begin_s - previous_finish_s))
        previous_start_s, previous_finish_s = begin_s, begin_s + compute
    busy = [(layer.start_s, layer.finish_s) for layer in layers]
    return IterationLayers(start_s, tuple(layers), sum(b - a for a, b in transfers),
                           sum(_overlap(t, busy) for t in transfers))


def _overlap(span: tuple[float, float], busy: Iterable[tuple[float, float]]) -> float:
    a, b = span
    return sum(max(0.0, min(b, d) - max(a, c)) for c, d in busy)


@dataclass(frozen=True, slots=True)
class LayerLatenessSummary:
    """Over a run's iterations: how many a cache-readiness stall delayed,
    the total delay, and the worst lateness of each layer index."""

    num_iterations: int
    num_iterations_delayed: int
    total_delay_s: float
    max_lateness_s: tuple[float, ...]  # per layer index
    overlap_fraction: float | None  # overlapped / total transfer time; None without transfers


class LayerTally:
    """A run's iterations as :func:`summarize` reads them, added as they
    come: counts, sums and each layer index's lateness samples (8 bytes an
    iteration a layer), not every layer's timings."""

    __slots__ = ("num_iterations", "num_iterations_delayed", "total_delay_s", "transfer_s",
                 "overlap_s", "lateness_s")

    def __init__(self) -> None:
        self.num_iterations = self.num_iterations_delayed = 0
        self.total_delay_s = self.transfer_s = self.overlap_s = 0.0
        self.lateness_s: list[array[float]] = []  # per layer index, one sample an iteration

    def add(self, iteration: IterationLayers) -> None:
        self.num_iterations += 1
        self.num_iterations_delayed += iteration.is_delayed
        self.total_delay_s += iteration.delay_s
        self.transfer_s += iteration.transfer_s
        self.overlap_s += iteration.overlap_s
        for layer in iteration.layers:
            while len(self.lateness_s) <= layer.layer_index:
                self.lateness_s.append(array("d"))
            self.lateness_s[layer.layer_index].append(layer.lateness_s)

    def summary(self) -> LayerLatenessSummary:
        return LayerLatenessSummary(
            self.num_iterations, self.num_iterations_delayed, self.total_delay_s,
            tuple(max(samples, default=0.0) for samples in self.lateness_s),
            self.overlap_s / self.transfer_s if self.transfer_s > 0 else None)


def summarize(iterations: Iterable[IterationLayers]) -> LayerLatenessSummary:
    tally = LayerTally()
    for iteration in iterations:
        tally.add(iteration)
    return tally.summary()
