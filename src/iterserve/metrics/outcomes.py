"""Outcome partition, rates and attainment over an observation window (0x07).

Every offered request (ORIGINAL arrival in W) is exactly one of:

- ``slo_valid``: finished inside W and met every declared clock;
- ``completed_miss``: finished inside W but missed at least one clock;
- ``rejected``: refused by admission inside W;
- ``unfinished``: open at window end, with one reason:
  ``waiting`` (never admitted), ``running`` (admitted, live),
  ``preempted`` (admitted, preempted and not resumed), or ``cancelled``.

Cancellation is counted inside ``unfinished`` with its own reported reason,
not as a completed miss: a cancelled request never completed, so it has no
request-level SLO verdict, and it was not refused by admission. Keeping it
out of N_miss keeps N_miss a statement about completed work only; keeping it
out of N_rej keeps N_rej a statement about the admission controller.

The partition must close, and is checked (F35):

    N_off = N_valid + N_miss + N_rej + N_open

Rates divide by the window duration W in seconds (F36, F37). E_i counts
outputs of offered request i emitted inside W, including partial streams of
unfinished requests; token goodput counts E_i only for SLO-valid requests.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from iterserve.metrics.clocks import RequestClocks
from iterserve.metrics.slo import ObservationWindow, SloConfig
from iterserve.metrics.timeline import RequestTimeline


class Outcome(StrEnum):
    SLO_VALID = "slo_valid"
    COMPLETED_MISS = "completed_miss"
    REJECTED = "rejected"
    UNFINISHED = "unfinished"


class OpenReason(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    CANCELLED = "cancelled"


class PartitionError(AssertionError):
    """The outcome partition does not close; a metrics bug, never a workload fact."""


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    """The verdict on one offered request inside one window."""

    request_id: str
    client_id: str
    outcome: Outcome
    is_admitted: bool
    num_emitted_tokens: int  # E_i: outputs emitted inside W
    open_reason: OpenReason | None = None
    missed_clocks: tuple[str, ...] = ()  # subset of ("ttft", "tbt", "tpot")
    reject_reason: str | None = None

    @property
    def is_completed(self) -> bool:
        return self.outcome in (Outcome.SLO_VALID, Outcome.COMPLETED_MISS)


def missed_clocks(clocks: RequestClocks, slo: SloConfig) -> tuple[str, ...]:
    """The declared clocks this request failed. An undefined TPOT (one output)
    is not a failure: no decode interval exists to judge."""
    missed: list[str] = []
    if slo.ttft_s is not None and (
        clocks.ttft_s is None or not slo.meets(clocks.ttft_s, slo.ttft_s)
    ):
        missed.append("ttft")
    tbt_s = slo.tbt_s
    gaps = clocks.tbt_gaps_s
    # every gap meets the limit exactly when the longest does (meets is <=)
    if tbt_s is not None and len(gaps) and not slo.meets(float(np.max(gaps)), tbt_s):
        missed.append("tbt")
    if (
        slo.tpot_s is not None
        and clocks.tpot_s is not None
        and not slo.meets(clocks.tpot_s, slo.tpot_s)
    ):
        missed.append("tpot")
    return tuple(missed)


def classify(timeline: RequestTimeline, clocks: RequestClocks, slo: SloConfig) -> RequestOutcome:
    """Verdict for one offered request whose timeline holds only in-window facts."""
    verdict = RequestOutcome(
        request_id=timeline.request_id,
        client_id=timeline.client_id,
        outcome=Outcome.UNFINISHED,
        is_admitted=timeline.is_admitted,
        num_emitted_tokens=timeline.num_output_tokens,
    )
    if timeline.is_finished:
        missed = missed_clocks(clocks, slo)
        outcome = Outcome.COMPLETED_MISS if missed else Outcome.SLO_VALID
        return dataclasses.replace(verdict, outcome=outcome, missed_clocks=missed)
    if timeline.is_rejected:
        return dataclasses.replace(
            verdict, outcome=Outcome.REJECTED, reject_reason=timeline.reject_reason
        )
    return dataclasses.replace(verdict, open_reason=_open_reason(timeline))


def _open_reason(timeline: RequestTimeline) -> OpenReason:
    if timeline.is_cancelled:
        return OpenReason.CANCELLED
    if not timeline.is_admitted:
        return OpenReason.WAITING
    return OpenReason.PREEMPTED if timeline.is_preempted else OpenReason.RUNNING


@dataclass(frozen=True, slots=True)
class OutcomeCounts:
    """Counts of the 0x07 ledger; construction raises if F35 does not close."""

    num_offered: int
    num_admitted: int
    num_completed: int
    num_slo_valid: int
    num_completed_miss: int
    num_rejected: int
    num_unfinished: int
    unfinished_reasons: tuple[tuple[str, int], ...] = ()
    missed_clocks: tuple[tuple[str, int], ...] = ()
    reject_reasons: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        closed = (
            self.num_slo_valid + self.num_completed_miss + self.num_rejected + self.num_unfinished
        )
        if closed != self.num_offered:
            raise PartitionError(
                f"outcome partition does not close: N_off={self.num_offered} but "
                f"N_valid+N_miss+N_rej+N_open={closed}"
            )
        if self.num_completed != self.num_slo_valid + self.num_completed_miss:
            raise PartitionError("N_comp must equal N_valid + N_miss")
        if sum(count for _, count in self.unfinished_reasons) != self.num_unfinished:
            raise PartitionError("unfinished reasons do not add up to N_open")
        if not self.num_completed <= self.num_admitted <= self.num_offered - self.num_rejected:
            raise PartitionError("N_comp <= N_adm <= N_off - N_rej does not hold")

    def to_dict(self) -> dict[str, Any]:
        return {
            "num_offered": self.num_offered,
            "num_admitted": self.num_admitted,
            "num_completed": self.num_completed,
            "num_slo_valid": self.num_slo_valid,
            "num_completed_miss": self.num_completed_miss,
            "num_rejected": self.num_rejected,
            "num_unfinished": self.num_unfinished,
            "unfinished_reasons": dict(self.unfinished_reasons),
            "completed_miss_clocks": dict(self.missed_clocks),
            "reject_reasons": dict(self.reject_reasons),
        }


def count_outcomes(outcomes: Iterable[RequestOutcome]) -> OutcomeCounts:
    """Tally verdicts into a closed ledger."""
    verdicts = list(outcomes)
    by_outcome = Counter(verdict.outcome for verdict in verdicts)
    return OutcomeCounts(
        num_offered=len(verdicts),
        num_admitted=sum(verdict.is_admitted for verdict in verdicts),
        num_completed=sum(verdict.is_completed for verdict in verdicts),
        num_slo_valid=by_outcome[Outcome.SLO_VALID],
        num_completed_miss=by_outcome[Outcome.COMPLETED_MISS],
        num_rejected=by_outcome[Outcome.REJECTED],
        num_unfinished=by_outcome[Outcome.UNFINISHED],
        unfinished_reasons=_sorted_counts(
            str(verdict.open_reason) for verdict in verdicts if verdict.open_reason is not None
        ),
        missed_clocks=_sorted_counts(
            clock for verdict in verdicts for clock in verdict.missed_clocks
        ),
        reject_reasons=_sorted_counts(
            verdict.reject_reason for verdict in verdicts if verdict.reject_reason is not None
        ),
    )


def _sorted_counts(keys: Iterable[str]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(Counter(keys).items()))


@dataclass(frozen=True, slots=True)
class Rates:
    """Fixed-window rate ledger (F36, F37). All rates are per second of W."""

    window_s: float
    offered_rate_per_s: float
    request_throughput_per_s: float
    request_goodput_per_s: float
    num_emitted_tokens: int
    num_slo_valid_tokens: int
    emitted_token_throughput_per_s: float
    slo_valid_token_goodput_per_s: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def window_rates(
    counts: OutcomeCounts, outcomes: Iterable[RequestOutcome], window: ObservationWindow
) -> Rates:
    verdicts = list(outcomes)
    num_emitted = sum(verdict.num_emitted_tokens for verdict in verdicts)
    num_valid_tokens = sum(
        verdict.num_emitted_tokens for verdict in verdicts if verdict.outcome is Outcome.SLO_VALID
    )
    window_s = window.duration_s
    return Rates(
        window_s=window_s,
        offered_rate_per_s=counts.num_offered / window_s,
        request_throughput_per_s=counts.num_completed / window_s,
        request_goodput_per_s=counts.num_slo_valid / window_s,
        num_emitted_tokens=num_emitted,
        num_slo_valid_tokens=num_valid_tokens,
        emitted_token_throughput_per_s=num_emitted / window_s,
        slo_valid_token_goodput_per_s=num_valid_tokens / window_s,
    )


COMPLETION_CONDITIONED_LABEL = "diagnostic: conditioned on completion; not offered-load attainment"


@dataclass(frozen=True, slots=True)
class Attainment:
    """Three fractions answering three questions (0x07). ``None`` when the
    denominator is zero. The completion-conditioned rate is diagnostic only
    and is always reported beside the offered-load attainment."""

    offered_load: float | None  # N_valid / N_off
    admitted: float | None  # N_valid / N_adm
    completion_conditioned: float | None  # N_valid / N_comp, diagnostic

    def to_dict(self) -> dict[str, Any]:
        return {
            "offered_load": self.offered_load,
            "admitted": self.admitted,
            "completion_conditioned": {
                "value": self.completion_conditioned,
                "label": COMPLETION_CONDITIONED_LABEL,
            },
        }


def attainment(counts: OutcomeCounts) -> Attainment:
    return Attainment(
        offered_load=_ratio(counts.num_slo_valid, counts.num_offered),
        admitted=_ratio(counts.num_slo_valid, counts.num_admitted),
        completion_conditioned=_ratio(counts.num_slo_valid, counts.num_completed),
    )


def _ratio(numerator: int, denominator: int) -> float | None:
    return None if denominator == 0 else numerator / denominator


def counts_by_client(outcomes: Iterable[RequestOutcome]) -> Mapping[str, OutcomeCounts]:
    """One closed ledger per client id, in client-id order."""
    grouped: dict[str, list[RequestOutcome]] = {}
    for verdict in outcomes:
        grouped.setdefault(verdict.client_id, []).append(verdict)
    return {client: count_outcomes(grouped[client]) for client in sorted(grouped)}
