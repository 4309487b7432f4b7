"""Admission records: the online candidate view and the three separate records (0x05, 0x06).

Data flow (0x06 "Reservation Estimate Is Not Allocation Result")::

    AdmissionCandidate, ReservationBudget  --policy-->  ReservationEstimate   (M5.2)
    ReservationEstimate                    --admit-->   AllocationRequest     (M5.2 -> M5.3)
    AllocationRequest                      --kv-->      PhysicalAllocationResult (M5.3 fact)

The candidate is everything a policy may legally know. It has no field for
the realized output length: hidden truth reaches only the offline evaluator.
Rows are logical K/V rows; bytes are rows times the M5.1 row coefficient.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from iterserve.records import frontier


@dataclass(frozen=True, slots=True)
class QuantileForecast:
    """``total_outputs`` is the forecast's ``quantile`` of the total output count G."""

    quantile: float
    total_outputs: int

    def __post_init__(self) -> None:
        if not 0.0 < self.quantile < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {self.quantile}")


@dataclass(frozen=True, slots=True)
class OutputForecast:
    """A versioned output-length prediction: a point value and optional quantiles."""

    prediction_version: str
    point_total_outputs: int
    quantiles: tuple[QuantileForecast, ...] = ()

    def __post_init__(self) -> None:
        if self.point_total_outputs < 1:
            raise ValueError("a forecast total is at least 1 (prefill emits output 1)")
        levels = [q.quantile for q in self.quantiles]
        if levels != sorted(set(levels)):
            raise ValueError(f"quantile levels must be strictly increasing, got {levels}")
        totals = [self.point_total_outputs] + [q.total_outputs for q in self.quantiles]
        if totals != sorted(totals):
            raise ValueError(f"forecasts must be ordered point <= quantiles, got {totals}")

    def total_outputs_at(self, quantile: float) -> int:
        for forecast in self.quantiles:
            if forecast.quantile == quantile:
                return forecast.total_outputs
        raise KeyError(f"no q={quantile} forecast in {self.prediction_version!r}; "
                       f"have {[q.quantile for q in self.quantiles]}")


@dataclass(frozen=True, slots=True)
class AdmissionCandidate:
    """Online view of one request generation waiting for a reservation (0x06).

    ``uncached_prompt_rows`` is U, the exact uncached prompt rows from the
    block manager's prefix result; it matters only before the prompt runs
    (``emitted_outputs == 0``). ``priority``: larger is more important.
    """

    request_id: str
    generation: int
    priority: int
    prompt_rows: int
    uncached_prompt_rows: int
    emitted_outputs: int
    max_tokens: int
    forecast: OutputForecast

    def __post_init__(self) -> None:
        if not self.request_id or self.generation < 0:
            raise ValueError("candidate needs a request id and a generation >= 0")
        if self.prompt_rows < 1 or not 0 <= self.uncached_prompt_rows <= self.prompt_rows:
            raise ValueError("need prompt_rows >= 1 and 0 <= uncached_prompt_rows <= prompt_rows")
        if not 0 <= self.emitted_outputs <= self.max_tokens:
            raise ValueError("need 0 <= emitted_outputs <= max_tokens")
        highest = max([self.forecast.point_total_outputs]
                      + [q.total_outputs for q in self.forecast.quantiles])
        if highest > self.max_tokens:
            raise ValueError(f"{self.label}: forecast {highest} exceeds max_tokens "
                             f"{self.max_tokens}")

    @property
    def label(self) -> str:
        return f"{self.request_id}:{self.generation}"

    @property
    def committed_rows(self) -> int:
        """T: rows already committed (0x05 first-token frontier: the target once E >= 1)."""
        if self.emitted_outputs == 0:
            return self.prompt_rows - self.uncached_prompt_rows
        return frontier.target(self.prompt_rows, self.emitted_outputs)


def future_append_rows(candidate: AdmissionCandidate, total_outputs: int) -> int:
    """Rows still to append if the request emits ``total_outputs`` outputs in all (0x05).

    New request: ``U + max(G - 1, 0)`` (prefill emits output 1; only later
    decodes append generated rows). Running request: ``max(G - E, 0)``. The
    same formula scores a forecast (A_hat) and, offline, the truth (A_star).
    """
    if candidate.emitted_outputs == 0:
        return candidate.uncached_prompt_rows + max(total_outputs - 1, 0)
    return max(total_outputs - candidate.emitted_outputs, 0)


@dataclass(frozen=True, slots=True)
class ReservationBudget:
    """The scheduler-visible reservation ledger at planning time (0x05, 0x06)."""

    reserved_rows: int
    hard_ceiling_rows: int
    bytes_per_row: int
    allocation_epoch: int

    def __post_init__(self) -> None:
        if min(self.reserved_rows, self.hard_ceiling_rows, self.allocation_epoch) < 0:
            raise ValueError("budget rows and epoch must be >= 0")
        if self.bytes_per_row <= 0:
            raise ValueError("bytes_per_row must be > 0")


@dataclass(frozen=True, slots=True)
class ReservationEstimate:
    """M5.2's estimate for one candidate; not an allocation (0x06)."""

    policy_id: str
    prediction_version: str
    request_id: str
    generation: int
    forecast_total_outputs: int
    estimated_append_rows: int
    estimated_append_bytes: int
    hard_ceiling_rows: int
    soft_ceiling_rows: int


@dataclass(frozen=True, slots=True)
class AllocationRequest:
    """What M5.2 asks M5.3 for; carries no block ids (0x06)."""

    request_id: str
    generation: int
    allocation_epoch: int
    requested_append_rows: int
    requested_append_bytes: int


class AdmissionDecision(enum.Enum):
    ADMIT = "admit"
    DEFER_CAPACITY = "defer_capacity"


@dataclass(frozen=True, slots=True)
class AdmissionIntent:
    """One candidate's planned outcome; ``allocation_request`` is None when deferred.

    There is deliberately no physical-result field: the plan is frozen before
    M5.3 answers, and guessing block ids would move allocator authority here.
    """

    request_id: str
    generation: int
    decision: AdmissionDecision
    estimate: ReservationEstimate
    allocation_request: AllocationRequest | None


@dataclass(frozen=True, slots=True)
class AdmissionPlan:
    """A frozen admission plan over FIFO candidates (0x06)."""

    policy_id: str
    allocation_epoch: int
    reserved_rows_before: int
    reserved_rows_after: int
    hard_ceiling_rows: int
    soft_ceiling_rows: int
    intents: tuple[AdmissionIntent, ...]

    @property
    def admitted(self) -> tuple[AdmissionIntent, ...]:
        return tuple(i for i in self.intents if i.decision is AdmissionDecision.ADMIT)

    @property
    def deferred(self) -> tuple[AdmissionIntent, ...]:
        return tuple(i for i in self.intents if i.decision is AdmissionDecision.DEFER_CAPACITY)
