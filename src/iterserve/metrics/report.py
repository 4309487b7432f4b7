"""One evaluator: event log + SLO + window -> report (0x07).

``evaluate(events, slo, window) -> Report`` is the only entry point the
simulator, the engine and the bench client need. It reads facts only; the
report dict (``Report.to_dict()``) has this schema (``schema`` =
``"iterserve.metrics.report/v1"``)::

    schema              str
    label               str     run or policy label
    window              {start_s, end_s, duration_s}
    slo                 {ttft_ms, tbt_ms, tpot_ms, clock_tolerance_ms}
    service_weights     {prompt_weight, output_weight}
    outcomes            {num_offered, num_admitted, num_completed, num_slo_valid,
                         num_completed_miss, num_rejected, num_unfinished,
                         unfinished_reasons {waiting|running|preempted|cancelled: n},
                         completed_miss_clocks {ttft|tbt|tpot: n},
                         reject_reasons {reason: n}}
    rates               {window_s, offered_rate_per_s, request_throughput_per_s,
                         request_goodput_per_s, num_emitted_tokens,
                         num_slo_valid_tokens, emitted_token_throughput_per_s,
                         slo_valid_token_goodput_per_s}
    attainment          {offered_load, admitted,
                         completion_conditioned {value, label: "diagnostic: ..."}}
    latency_ms          {ttft|tbt|tpot|end_to_end|queue:
                            {n, mean, p50|p95|p99: {status, n[, value]}}}
    per_client          {client_id: {outcomes, attainment,
                                     num_emitted_tokens, service_in_window}}
    samples_ms          optional (include_samples=True): raw sorted samples

Sample definitions (all over the offered cohort, facts inside W only):
TTFT for every request whose output 0 was emitted in W (any outcome); TBT every
gap between outputs emitted in W; TPOT and end-to-end for completed requests
(TPOT only when n_out >= 2); queue time for requests with an admit event.
Latency percentiles never replace the outcome ledger: rejected and unfinished
requests stay in ``outcomes`` beside them.

``service_in_window`` is weighted completed service (F53) to the client's
requests inside W, including requests that arrived before W.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from iterserve.metrics.clocks import RequestClocks, request_clocks
from iterserve.metrics.counted_sample import CountedSample, count_values
from iterserve.metrics.event_scan import scan_event_list
from iterserve.metrics.events import Event
from iterserve.metrics.outcomes import (
    Attainment,
    OutcomeCounts,
    Rates,
    RequestOutcome,
    attainment,
    classify,
    count_outcomes,
    counts_by_client,
    window_rates,
)
from iterserve.metrics.percentiles import summarize
from iterserve.metrics.series import ServiceWeights
from iterserve.metrics.service_scan import client_service_totals
from iterserve.metrics.slo import ObservationWindow, SloConfig
from iterserve.metrics.timeline import RequestTimeline
from iterserve.records.time_units import MS_PER_S

REPORT_SCHEMA = "iterserve.metrics.report/v1"


@dataclass(frozen=True, slots=True)
class LatencySamples:
    """Raw clock samples in seconds, each an ascending float64 array (see the
    module docstring); the run summary's TBT gaps are a :class:`CountedSample`
    (one per token, few distinct: :func:`counted_latency_samples`)."""

    ttft_s: NDArray[np.float64]
    tbt_s: NDArray[np.float64] | CountedSample
    tpot_s: NDArray[np.float64]
    end_to_end_s: NDArray[np.float64]
    queue_s: NDArray[np.float64]

    def named(self) -> dict[str, NDArray[np.float64] | CountedSample]:
        return {
            "ttft": self.ttft_s,
            "tbt": self.tbt_s,
            "tpot": self.tpot_s,
            "end_to_end": self.end_to_end_s,
            "queue": self.queue_s,
        }


@dataclass(frozen=True, slots=True)
class ClientReport:
    client_id: str
    outcomes: OutcomeCounts
    attainment: Attainment
    num_emitted_tokens: int
    service_in_window: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcomes": self.outcomes.to_dict(),
            "attainment": self.attainment.to_dict(),
            "num_emitted_tokens": self.num_emitted_tokens,
            "service_in_window": self.service_in_window,
        }


@dataclass(frozen=True, slots=True)
class Report:
    label: str
    window: ObservationWindow
    slo: SloConfig
    service_weights: ServiceWeights
    outcomes: OutcomeCounts
    rates: Rates
    attainment: Attainment
    samples: LatencySamples
    per_client: tuple[ClientReport, ...]
    request_outcomes: tuple[RequestOutcome, ...]
    request_clocks: tuple[RequestClocks, ...]

    def to_dict(self, *, include_samples: bool = False) -> dict[str, Any]:
        record: dict[str, Any] = {
            "schema": REPORT_SCHEMA,
            "label": self.label,
            "window": self.window.to_dict(),
            "slo": self.slo.to_dict(),
            "service_weights": self.service_weights.to_dict(),
            "outcomes": self.outcomes.to_dict(),
            "rates": self.rates.to_dict(),
            "attainment": self.attainment.to_dict(),
            "latency_ms": {
                name: summarize(values).to_dict(scale=MS_PER_S)
                for name, values in self.samples.named().items()
            },
            "per_client": {client.client_id: client.to_dict() for client in self.per_client},
        }
        if include_samples:
            record["samples_ms"] = {
                name: (np.asarray(values) * MS_PER_S).tolist()  # the same products, as floats
                for name, values in self.samples.named().items()
            }
        return record


def evaluate(
    events: Iterable[Event],
    slo: SloConfig,
    window: ObservationWindow,
    *,
    label: str = "run",
    service_weights: ServiceWeights | None = None,
) -> Report:
    """Evaluate one run. The whole log is lifecycle-checked; only facts
    stamped inside ``window`` are observed; the cohort is every request whose
    original arrival lies in ``window``."""
    all_events = list(events)
    scan = scan_event_list(all_events)  # validates the full log, including facts after W
    if not scan.covers(window):  # facts past the window's end: rebuild up to it
        scan = scan_event_list(all_events, end_s=window.end_s)
    return evaluate_timelines(scan.timelines, slo, window, label=label,
                              service_weights=service_weights)


def evaluate_timelines(
    observed: Mapping[str, RequestTimeline],
    slo: SloConfig,
    window: ObservationWindow,
    *,
    label: str = "run",
    service_weights: ServiceWeights | None = None,
) -> Report:
    """:func:`evaluate` over timelines already built from a validated log
    with facts before ``window.end_s`` (one streaming pass over a long run's
    events.jsonl instead of the event list)."""
    weights = service_weights or ServiceWeights()
    cohort = [
        observed[request_id]
        for request_id in sorted(observed)
        if window.contains(observed[request_id].arrival_s)
    ]
    clocks = [request_clocks(timeline) for timeline in cohort]
    verdicts = [
        classify(timeline, clock, slo) for timeline, clock in zip(cohort, clocks, strict=True)
    ]
    counts = count_outcomes(verdicts)
    service = client_service_totals(observed.values(), weights, start_s=window.start_s)
    return Report(
        label=label,
        window=window,
        slo=slo,
        service_weights=weights,
        outcomes=counts,
        rates=window_rates(counts, verdicts, window),
        attainment=attainment(counts),
        samples=_samples(clocks, verdicts),
        per_client=_per_client(verdicts, service),
        request_outcomes=tuple(verdicts),
        request_clocks=tuple(clocks),
    )


def _samples(clocks: Sequence[RequestClocks], verdicts: Sequence[RequestOutcome]) -> LatencySamples:
    return latency_samples(clocks, [verdict.is_completed for verdict in verdicts])


def latency_samples(clocks: Sequence[RequestClocks], is_completed: Sequence[bool]) -> LatencySamples:
    """The sample definitions of the module docstring: TTFT, TBT and queue
    time over every request; TPOT and end-to-end over completed ones. Each
    is one ascending float64 array (8 bytes a sample): a long run has a TBT
    gap per token."""
    tbt_s = np.empty(sum(len(clock.tbt_gaps_s) for clock in clocks))
    at = 0
    for clock in clocks:  # one request's gaps at a time (a compact one's are made here)
        gaps = np.asarray(clock.tbt_gaps_s, dtype=np.float64)
        tbt_s[at:at + len(gaps)] = gaps
        at += len(gaps)
    tbt_s.sort()  # in place: one array, no sorted copy
    return _with_tbt(clocks, is_completed, tbt_s)


def counted_latency_samples(clocks: Sequence[RequestClocks],
                            is_completed: Sequence[bool]) -> LatencySamples:
    """:func:`latency_samples` with the TBT gaps counted by value (a
    :class:`CountedSample`, the same sample): a long run has a gap per token
    and few distinct ones; a request's gaps are made and counted in turn."""
    tbt_s = count_values(np.asarray(clock.tbt_gaps_s, dtype=np.float64) for clock in clocks)
    return _with_tbt(clocks, is_completed, tbt_s)


def _with_tbt(clocks: Sequence[RequestClocks], is_completed: Sequence[bool],
              tbt_s: NDArray[np.float64] | CountedSample) -> LatencySamples:
    completed = [clock for clock, done in zip(clocks, is_completed, strict=True) if done]
    return LatencySamples(
        ttft_s=_ascending(clock.ttft_s for clock in clocks),
        tbt_s=tbt_s,
        tpot_s=_ascending(clock.tpot_s for clock in completed),
        end_to_end_s=_ascending(clock.end_to_end_s for clock in completed),
        queue_s=_ascending(clock.queue_s for clock in clocks),
    )


def _ascending(values: Iterable[float | None]) -> NDArray[np.float64]:
    ordered = np.fromiter((value for value in values if value is not None), dtype=np.float64)
    ordered.sort()
    return ordered


def _per_client(
    verdicts: Sequence[RequestOutcome], service: Mapping[str, float]
) -> tuple[ClientReport, ...]:
    reports = []
    for client, counts in counts_by_client(verdicts).items():
        reports.append(
            ClientReport(
                client_id=client,
                outcomes=counts,
                attainment=attainment(counts),
                num_emitted_tokens=sum(
                    verdict.num_emitted_tokens
                    for verdict in verdicts
                    if verdict.client_id == client
                ),
                service_in_window=service.get(client, 0.0),
            )
        )
    return tuple(reports)
