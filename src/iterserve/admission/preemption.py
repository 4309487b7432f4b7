"""Preemption intent and the foreign facts that answer it (0x0C).

``PreemptionIntent`` is M5.2 policy output; ``ReleaseResult`` (M5.3) and
``PreservationResult`` (M5.5) are foreign facts (their home is
:mod:`iterserve.records.receipts`, beside the transition that consumes them).
All carry the same
four-part :class:`ForeignBinding`. No record here holds block ids, copy
streams, host addresses or placement: those stay foreign implementation state.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from iterserve.records.preemption import FallbackMode, PreemptionMode
from iterserve.records.receipts import (
    ForeignBinding,
    ForeignStatus,
    ReleaseResult,
    is_stale,
)


class PreemptionReason(enum.Enum):
    KV_CAPACITY = "kv_capacity"  # an extension or allocation was denied
    PRIORITY = "priority"
    SLO_RISK = "slo_risk"
    FAIRNESS = "fairness"
    OPERATOR = "operator"


_FALLBACKS: dict[PreemptionMode, frozenset[FallbackMode]] = {
    PreemptionMode.SWAP: frozenset(FallbackMode),
    PreemptionMode.RECOMPUTE: frozenset({FallbackMode.REMAIN_SUSPENDED, FallbackMode.ABORT}),
    PreemptionMode.ABORT: frozenset({FallbackMode.ABORT}),
}


@dataclass(frozen=True, slots=True)
class PreemptionIntent:
    """A policy's request to stop one request generation; not a release (0x0C).

    ``semantic_target_tokens`` is T_target, the frozen semantic frontier
    (:func:`records.frontier.target` of a decoding request). Recompute, as mode or
    fallback, is legal only with immutable token history.
    """

    intent_id: str
    binding: ForeignBinding
    mode: PreemptionMode
    fallback: FallbackMode
    semantic_target_tokens: int
    reason: PreemptionReason
    policy_id: str
    decision_version: int
    has_token_history: bool = True

    def __post_init__(self) -> None:
        if not self.intent_id or not self.policy_id:
            raise ValueError("intent_id and policy_id must be non-empty")
        if self.semantic_target_tokens < 0 or self.decision_version < 0:
            raise ValueError("semantic_target_tokens and decision_version must be >= 0")
        if self.fallback not in _FALLBACKS[self.mode]:
            raise ValueError(f"fallback {self.fallback.name} is illegal for {self.mode.name}")
        uses_recompute = self.mode is PreemptionMode.RECOMPUTE or \
            self.fallback is FallbackMode.RECOMPUTE
        if uses_recompute and not self.has_token_history:
            raise ValueError("recompute without immutable token history is invalid")


def reclaimed_capacity_bytes(release: ReleaseResult, current: ForeignBinding) -> int:
    """Bytes the scheduler may count as freed: a current, READY release only (0x0C)."""
    if release.status is not ForeignStatus.READY or is_stale(release.binding, current):
        return 0
    return release.reclaimed_bytes
