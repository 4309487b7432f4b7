"""The run summary a person reads, with or without an SLO (0x07).

Every ``simulate`` report carries it: request counts, throughput, gated
latency distributions (TTFT, TBT, TPOT, end-to-end, queue time; nearest
rank, withheld below their sample gate), preemptions, KV block use, and the
two capacity-use figures under their own names (logical slot occupancy of
sequences, token-budget utilisation of rows; both over every executed
iteration, not only the window). It judges nothing: the outcome
ledger and attainment need an SLO and live in :mod:`iterserve.metrics.report`.

Cohort and samples follow :mod:`iterserve.metrics.report`: requests whose
original arrival lies in the window, facts stamped inside it. Times are shown
in the run's :class:`~iterserve.metrics.time_unit.TimeUnit` (iterations on
the iteration clock).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from iterserve.metrics.capacity import (
    BudgetUse,
    IterationComposition,
    batched_tokens_utilisation,
    sequence_slot_occupancy,
)
from iterserve.metrics.clocks import request_clocks
from iterserve.metrics.columns import field_values
from iterserve.metrics.event_scan import scan_event_list
from iterserve.metrics.events import Event
from iterserve.metrics.percentiles import summarize
from iterserve.metrics.report import LatencySamples, counted_latency_samples
from iterserve.metrics.series import ResourceSample
from iterserve.metrics.slo import ObservationWindow
from iterserve.metrics.time_unit import TimeUnit
from iterserve.metrics.timeline import RequestTimeline

SUMMARY_SCHEMA = "iterserve.metrics.run_summary/v1"


@dataclass(frozen=True, slots=True)
class RequestCounts:
    num_offered: int
    num_completed: int
    num_rejected: int
    num_cancelled: int
    num_unfinished: int
    num_emitted_tokens: int


@dataclass(frozen=True, slots=True)
class KvUse:
    """KV blocks in use, sampled at each decision."""

    num_blocks_total: int
    peak_num_blocks_used: int
    mean_usage_fraction: float


@dataclass(frozen=True, slots=True)
class RunSummary:
    label: str
    window: ObservationWindow
    unit: TimeUnit
    counts: RequestCounts
    samples: LatencySamples
    num_preemptions: dict[str, int]  # by mode: recompute, swap
    num_resumes: int
    kv: KvUse | None
    slot_occupancy: BudgetUse | None
    batched_tokens_utilisation: BudgetUse

    def window_in_units(self) -> float:
        return self.unit.from_s(self.window.duration_s)

    def latency(self) -> dict[str, Any]:
        return {name: summarize(values).to_dict(scale=self.unit.latency_scale)
                for name, values in self.samples.named().items()}

    def throughput(self) -> dict[str, Any]:
        span = self.window_in_units()
        suffix = self.unit.rate_suffix
        return {
            f"window_{'iterations' if self.unit.is_iterations else 's'}": span,
            f"offered_rate_{suffix}": self.counts.num_offered / span,
            f"request_throughput_{suffix}": self.counts.num_completed / span,
            f"emitted_token_throughput_{suffix}": self.counts.num_emitted_tokens / span,
        }

    def to_dict(self) -> dict[str, Any]:
        kv = self.kv
        return {
            "schema": SUMMARY_SCHEMA,
            "label": self.label,
            "time_unit": self.unit.name,
            "seconds_per_clock_unit": self.unit.seconds_per_unit,
            "window": self.window.to_dict(),
            "requests": vars_of(self.counts),
            "throughput": self.throughput(),
            f"latency_{self.unit.latency_name}": self.latency(),
            "preemptions": {**self.num_preemptions, "resumes": self.num_resumes},
            "kv_blocks": None if kv is None else {
                "num_blocks_total": kv.num_blocks_total,
                "peak_num_blocks_used": kv.peak_num_blocks_used,
                "peak_usage_fraction": kv.peak_num_blocks_used / kv.num_blocks_total,
                "mean_usage_fraction": kv.mean_usage_fraction,
            },
            "logical_slot_occupancy": (None if self.slot_occupancy is None
                                       else self.slot_occupancy.to_dict()),
            "batched_tokens_utilisation": self.batched_tokens_utilisation.to_dict(),
        }


def vars_of(counts: RequestCounts) -> dict[str, int]:
    return {name: getattr(counts, name) for name in RequestCounts.__dataclass_fields__}


def summarize_run(
    events: Sequence[Event],
    window: ObservationWindow,
    unit: TimeUnit,
    *,
    label: str,
    iterations: Sequence[IterationComposition],
    resources: Sequence[ResourceSample],
    max_num_batched_tokens: int,
    max_num_seqs: int,
) -> RunSummary:
    scan = scan_event_list(events, end_s=window.end_s)
    return summarize_timelines(
        scan.timelines, window, unit, label=label,
        preempt_modes=scan.preempt_modes(window), num_resumes=scan.num_resumes(window),
        iterations=iterations, resources=resources, max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs)


def summarize_timelines(
    observed: Mapping[str, RequestTimeline],
    window: ObservationWindow,
    unit: TimeUnit,
    *,
    label: str,
    preempt_modes: Sequence[str],
    num_resumes: int,
    iterations: Sequence[IterationComposition],
    resources: Sequence[ResourceSample],
    max_num_batched_tokens: int,
    max_num_seqs: int,
) -> RunSummary:
    """:func:`summarize_run` over timelines built with facts before the
    window's end, given the modes of the preemptions and the number of
    resumes stamped inside the window (one streaming pass over a long run's
    events.jsonl gathers all three)."""
    cohort = [t for _, t in sorted(observed.items()) if window.contains(t.arrival_s)]
    clocks = [request_clocks(t) for t in cohort]
    completed = [t.is_finished for t in cohort]
    counts = RequestCounts(
        num_offered=len(cohort),
        num_completed=sum(completed),
        num_rejected=sum(t.is_rejected for t in cohort),
        num_cancelled=sum(t.is_cancelled and not t.is_finished for t in cohort),
        num_unfinished=sum(not (t.is_finished or t.is_rejected or t.is_cancelled)
                           for t in cohort),
        num_emitted_tokens=sum(len(t.emission_s) for t in cohort),
    )
    return RunSummary(
        label=label, window=window, unit=unit, counts=counts,
        samples=counted_latency_samples(clocks, completed),
        num_preemptions={"recompute": preempt_modes.count("recompute"),
                         "swap": preempt_modes.count("swap")},
        num_resumes=num_resumes,
        kv=_kv_use(resources),
        slot_occupancy=sequence_slot_occupancy(iterations, max_num_seqs),
        batched_tokens_utilisation=batched_tokens_utilisation(iterations, max_num_batched_tokens),
    )


def _kv_use(resources: Sequence[ResourceSample]) -> KvUse | None:
    totals = field_values(resources, "num_kv_blocks_total")
    used = field_values(resources, "num_kv_blocks_used")
    bounded = [(u, t) for u, t in zip(used, totals, strict=True) if t > 0]
    if not bounded:
        return None
    return KvUse(
        num_blocks_total=max(t for _, t in bounded),
        peak_num_blocks_used=max(u for u, _ in bounded),
        mean_usage_fraction=fmean(u / t for u, t in bounded),
    )
