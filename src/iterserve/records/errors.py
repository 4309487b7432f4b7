"""One named error per contract invariant (0x01A negative fixtures).

Every error is a :class:`ContractViolation`; ``code`` is a stable
machine-readable name used by the decision log and the replay tool.
"""

from __future__ import annotations


class ContractViolation(ValueError):
    code = "contract_violation"


# --- plan versus state ------------------------------------------------------
class StaleStateVersion(ContractViolation):
    code = "stale_state_version"


class PolicyIdentityMismatch(ContractViolation):
    code = "policy_identity_mismatch"


class UnknownRequest(ContractViolation):
    code = "unknown_request"


class StaleGeneration(ContractViolation):
    code = "stale_generation"


class StaleSnapshot(ContractViolation):
    code = "stale_snapshot"


class NotReady(ContractViolation):
    code = "not_ready"


class TerminalRequest(ContractViolation):
    code = "terminal_request"


class NotAdmitted(ContractViolation):
    code = "not_admitted"


class IntervalBeforeFrontier(ContractViolation):
    code = "interval_before_frontier"


class IntervalBeyondTarget(ContractViolation):
    code = "interval_beyond_target"


class EmptyInterval(ContractViolation):
    code = "empty_interval"


class MultiRowDecode(ContractViolation):
    code = "multi_row_decode"


class ForgedKind(ContractViolation):
    code = "forged_kind"


class ForgedPositions(ContractViolation):
    code = "forged_positions"


class DuplicateWork(ContractViolation):
    code = "duplicate_work"


class TokenBudgetExceeded(ContractViolation):
    code = "token_budget_exceeded"


class SequenceBudgetExceeded(ContractViolation):
    code = "sequence_budget_exceeded"


class KvCapacityExceeded(ContractViolation):
    code = "kv_capacity_exceeded"


class LedgerDrift(ContractViolation):
    code = "ledger_drift"


class ForgedTieBreak(ContractViolation):
    code = "forged_tie_break"


class InformationLeak(ContractViolation):
    code = "information_leak"


class IllegalIntent(ContractViolation):
    code = "illegal_intent"


# --- state itself -----------------------------------------------------------
class DuplicateQueueMember(ContractViolation):
    code = "duplicate_queue_member"


class QueueLifecycleMismatch(ContractViolation):
    code = "queue_lifecycle_mismatch"


class UncommittedFrontier(ContractViolation):
    code = "uncommitted_frontier"


# --- result versus plan -----------------------------------------------------
class StaleResult(ContractViolation):
    code = "stale_result"


class UnplannedCompletion(ContractViolation):
    code = "unplanned_completion"


class CompletionBeyondPlan(ContractViolation):
    code = "completion_beyond_plan"


class DuplicateCompletion(ContractViolation):
    code = "duplicate_completion"


class WrongOutputClock(ContractViolation):
    code = "wrong_output_clock"


class ServiceDebitMismatch(ContractViolation):
    code = "service_debit_mismatch"


class UnmatchedRelease(ContractViolation):
    """A release receipt answers no releasing intent of its plan, or is not
    bound to the binding that intent opened (0x0C)."""

    code = "unmatched_release"
