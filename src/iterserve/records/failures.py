"""The cumulative failure registry (0x0E "Fifteen failure classes close at
different boundaries"; 0x0F: a failure is a missing owner).

Fifteen classes. Eleven close errors of the earlier sections and consume
their rejection cases by identity: each names the rejection codes that
report it (``codes``, every :class:`~iterserve.records.errors.ContractViolation`
code belongs to exactly one class) and cites fourteen of them in all as its
evidence (``evidence``, the negative fixtures the class rests on) instead of
re-implementing their checks. Four are new 0x0E rules that close
comparison-specific errors; each names the module that enforces it.

Every class names its boundary: the owner that closes it. The scheduler
closes only what it owns; a failure whose owner is foreign (readiness,
residency, placement) is refused, never repaired by the policy. A code not
in the registry is unknown failure evidence and raises.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class FailureBoundary(enum.Enum):
    """The owner whose decision point closes a failure class (0x0F)."""

    RECORDS = "records: version binding and the legal-interval frontier (0x00B, 0x01A)"
    ADMISSION = "admission: lifecycle, iteration budgets, online projection (0x05, 0x06)"
    KV_BUDGET = "KV budget: only the allocator publishes capacity (0x06, 0x0C, M5.3)"
    FOREIGN_OWNER = "foreign owner: remote K/V, promotion, layer residency, placement (0x0C, 0x09B)"
    POLICY_ORDER = "policy: prefill/decode priority and its declared tie-break (0x03, 0x08)"
    EXECUTOR = "executor: a result publishes only planned, completed work (0x00B)"
    METRICS = "metrics: SLO clocks start at arrival and the previous output (0x07)"
    FAIRNESS = "fairness: service is debited from completed work (0x09A)"
    COMPARISON = "comparison: contracts, coordinates and evidence classes (0x0E)"


@dataclass(frozen=True, slots=True)
class FailureClass:
    failure_id: str  # FC01 .. FC15
    name: str
    boundary: FailureBoundary
    meaning: str  # what the failure is, in one sentence
    sections: str  # the spec sections it closes
    codes: tuple[str, ...]  # rejection codes that report it
    evidence: tuple[str, ...]  # prior rejection cases consumed by identity (earlier sections)
    enforced_by: str  # the module that refuses it
    is_new_in_0x0e: bool = False

    @property
    def label(self) -> str:
        return f"{self.failure_id} {self.name}"


def _prior(failure_id: str, name: str, boundary: FailureBoundary, meaning: str, sections: str,
           codes: tuple[str, ...], evidence: tuple[str, ...],
           enforced_by: str = "records.validate") -> FailureClass:
    return FailureClass(failure_id, name, boundary, meaning, sections, codes, evidence,
                        enforced_by)


def _new(failure_id: str, name: str, meaning: str, code: str, enforced_by: str) -> FailureClass:
    return FailureClass(failure_id, name, FailureBoundary.COMPARISON, meaning, "0x0E", (code,),
                        (), enforced_by, is_new_in_0x0e=True)


B = FailureBoundary
FAILURE_CLASSES: tuple[FailureClass, ...] = (
    _prior("FC01", "stale-binding", B.RECORDS,
           "a plan, result or receipt names a state version, generation, snapshot or policy "
           "that is no longer current, so it cannot act", "0x00B, 0x0C",
           ("stale_state_version", "stale_generation", "stale_snapshot", "stale_result",
            "policy_identity_mismatch", "unmatched_release"),
           ("stale_state_version", "stale_generation")),
    _prior("FC02", "illegal-interval", B.RECORDS,
           "work outside the request's next legal interval: before the computed frontier, past "
           "the prompt or target, empty, more than one decode row, or forged kind / positions",
           "0x01A", ("interval_before_frontier", "interval_beyond_target", "empty_interval",
                     "multi_row_decode", "forged_kind", "forged_positions"),
           ("interval_before_frontier", "multi_row_decode")),
    _prior("FC03", "not-runnable-lifecycle", B.ADMISSION,
           "work or an intent for a request its lifecycle does not allow: unknown, terminal, "
           "not admitted, listed twice, or in a queue that disagrees with its state",
           "0x00B, 0x0C", ("unknown_request", "terminal_request", "not_admitted", "illegal_intent",
                           "duplicate_work", "duplicate_queue_member", "queue_lifecycle_mismatch"),
           ("terminal_request",)),
    _prior("FC04", "iteration-budget", B.ADMISSION,
           "a plan spends more token rows or sequences than the iteration budget, or its own "
           "ledger disagrees with its work", "0x05",
           ("token_budget_exceeded", "sequence_budget_exceeded", "ledger_drift"),
           ("token_budget_exceeded", "sequence_budget_exceeded")),
    _prior("FC05", "reservation-as-allocation", B.KV_BUDGET,
           "a plan counts K/V rows the allocator has not published as free (a reservation or a "
           "pending release is not capacity)", "0x06, 0x0C", ("kv_capacity_exceeded",),
           ("kv_capacity_exceeded",)),
    _prior("FC06", "hidden-truth-leak", B.ADMISSION,
           "a decision reads a realized output length the online projection must not show",
           "0x06", ("information_leak",), ("information_leak",)),
    _prior("FC07", "foreign-readiness-collapse", B.FOREIGN_OWNER,
           "the scheduler plans work whose foreign precondition (remote K/V, promotion, layer "
           "residency, placement) is not READY: a fact it does not own cannot be repaired by "
           "priority, a prefix hit or a slack estimate", "0x0C, 0x09B, 0x0E", ("not_ready",),
           ("not_ready",)),
    _prior("FC08", "undeclared-order", B.POLICY_ORDER,
           "a plan's order is not the one its declared tie-break key gives, so the decision "
           "cannot be replayed", "0x00B, 0x03", ("forged_tie_break",), ("forged_tie_break",)),
    _prior("FC09", "unplanned-result", B.EXECUTOR,
           "a result completes work that was not planned, more than planned, twice, or past "
           "the committed frontier", "0x00B, 0x01A",
           ("unplanned_completion", "completion_beyond_plan", "duplicate_completion",
            "uncommitted_frontier"), ("unplanned_completion",)),
    _prior("FC10", "clock-reset", B.METRICS,
           "an output is timed from the wrong clock: TTFT not from the original arrival or TBT "
           "not from the previous output", "0x07", ("wrong_output_clock",),
           ("wrong_output_clock",)),
    _prior("FC11", "planned-service-debit", B.FAIRNESS,
           "fairness service is debited from planned rows, rebuild rows or anything other than "
           "completed work", "0x09A", ("service_debit_mismatch",), ("service_debit_mismatch",)),
    _new("FC12", "incomparable-ranking",
         "two results are ordered although a coordinate of the comparison set differs (a "
         "shared word such as 'throughput' or a paper name is not enough; no universal "
         "ranking)", "incomparable_pair", "lab.compare"),
    _new("FC13", "local-measurement-overclaim",
         "a source-reported value is presented as reproduced here", "local_measurement_overclaim",
         "lab.source_registry"),
    _new("FC14", "theorem-transfer",
         "a composition keeps a component's identity, theorem premises or results although "
         "it changes decisions", "theorem_transfer", "policies.starvation_guard"),
    _new("FC15", "compound-sensitivity",
         "a sensitivity case changes more than one control, so no ledger change can be "
         "attributed", "compound_sensitivity", "lab.sensitivity"),
)

_BY_CODE = {code: failure for failure in FAILURE_CLASSES for code in failure.codes}


class UnknownFailureEvidence(KeyError):
    """A rejection code no failure class owns."""


def failure_of(code: str) -> FailureClass:
    """The class a rejection code reports; UnknownFailureEvidence otherwise."""
    try:
        return _BY_CODE[code]
    except KeyError:
        raise UnknownFailureEvidence(f"rejection code {code!r} belongs to no failure class "
                                     "of the 0x0E registry") from None


def failure_label(code: str) -> str:
    """``FCnn name`` of a known code; the bare base code of an unclassified
    contract violation stays itself (it names no class)."""
    return failure_of(code).label if code in _BY_CODE else code
