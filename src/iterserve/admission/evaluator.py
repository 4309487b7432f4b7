"""Offline hidden-truth evaluation of a frozen admission plan (0x06).

Run only after the plan is frozen and the realized output lengths G_star are
revealed; they are passed in explicitly and never stored on a candidate. Per
admitted request the signed reservation error is ``eps = A_hat - A_star``
(over-reservation when positive, under-reservation when negative). Over the
plan::

    realized_rows = R_0 + sum over admitted of A_star
    hard_breach   = max(realized_rows - C_hard, 0)
    extension     = sum of under-reservations (rows requested beyond estimates)

An extension that keeps ``realized_rows <= C_hard`` needs no victim. A breach
names preemption candidates, lowest priority first (ties: latest admitted
first), until their realized footprint covers the breach; each candidate keeps
its score inputs. Naming a candidate is intent, not release (0x0C).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iterserve.admission.records import AdmissionCandidate, AdmissionPlan, future_append_rows

VICTIM_ORDER = "priority ascending, then admission position descending"


@dataclass(frozen=True, slots=True)
class LogicalAmount:
    """Logical K/V rows and the same amount in bytes (rows * delta_KV_row, 0x05)."""

    rows: int
    num_bytes: int


@dataclass(frozen=True, slots=True)
class PreemptionCandidate:
    """A named victim with the inputs that ranked it (0x0C victim record)."""

    request_id: str
    generation: int
    score_inputs: tuple[tuple[str, int], ...]
    tie_break: str

    @property
    def label(self) -> str:
        return f"{self.request_id}:{self.generation}"


@dataclass(frozen=True, slots=True)
class PolicyEvaluation:
    """Hindsight scores of one policy's plan, in rows and bytes."""

    policy_id: str
    admitted: tuple[str, ...]
    rejected: tuple[str, ...]
    reserved_rows: int
    realized_rows: int
    over_reservation: LogicalAmount
    under_reservation: LogicalAmount
    hard_breach: LogicalAmount
    extension: LogicalAmount
    preemption_candidates: tuple[PreemptionCandidate, ...]

    @property
    def extends_without_victim(self) -> bool:
        return self.extension.rows > 0 and not self.preemption_candidates


def evaluate_plan(plan: AdmissionPlan, candidates: Sequence[AdmissionCandidate],
                  realized_total_outputs: Mapping[str, int],
                  bytes_per_row: int) -> PolicyEvaluation:
    """Score ``plan`` against the revealed ``realized_total_outputs`` (by request id)."""
    by_label = {candidate.label: candidate for candidate in candidates}
    if [i.estimate.request_id for i in plan.intents] != [c.request_id for c in candidates]:
        raise ValueError("the plan was not made from these candidates")
    missing = [c.request_id for c in candidates if c.request_id not in realized_total_outputs]
    if missing:
        raise KeyError(f"no realized length for {missing}")

    def amount(rows: int) -> LogicalAmount:
        return LogicalAmount(rows, rows * bytes_per_row)

    over = under = realized = 0
    admitted = [by_label[f"{i.request_id}:{i.generation}"] for i in plan.admitted]
    footprints: dict[str, int] = {}
    for intent, candidate in zip(plan.admitted, admitted, strict=True):
        actual = future_append_rows(candidate, realized_total_outputs[candidate.request_id])
        error = intent.estimate.estimated_append_rows - actual
        over += max(error, 0)
        under += max(-error, 0)
        realized += actual
        footprints[candidate.label] = candidate.committed_rows + actual
    realized_rows = plan.reserved_rows_before + realized
    breach_rows = max(realized_rows - plan.hard_ceiling_rows, 0)
    return PolicyEvaluation(
        plan.policy_id, tuple(c.label for c in admitted),
        tuple(f"{i.request_id}:{i.generation}" for i in plan.deferred),
        plan.reserved_rows_after, realized_rows, amount(over), amount(under),
        amount(breach_rows), amount(under), _victims(admitted, footprints, breach_rows))


def _victims(admitted: Sequence[AdmissionCandidate], footprints: Mapping[str, int],
             breach_rows: int) -> tuple[PreemptionCandidate, ...]:
    ranked = sorted(enumerate(admitted), key=lambda pair: (pair[1].priority, -pair[0]))
    victims: list[PreemptionCandidate] = []
    released = 0
    for position, candidate in ranked:
        if released >= breach_rows:
            break
        released += footprints[candidate.label]
        inputs = (("priority", candidate.priority), ("admission_position", position),
                  ("realized_footprint_rows", footprints[candidate.label]))
        victims.append(PreemptionCandidate(candidate.request_id, candidate.generation, inputs,
                                           VICTIM_ORDER))
    return tuple(victims)
