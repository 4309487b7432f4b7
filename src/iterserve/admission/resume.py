"""Resume tickets derived from current foreign facts (0x0C).

``derive_resume_ticket`` validates facts and publishes policy output; it
copies no K/V, allocates nothing and places nothing. With T_target frozen by
the intent and T_ready the longest exact, identity-matched ready prefix::

    rebuild interval       = [T_ready, T_target)
    ordinary next frontier = T_target (then decode [T_target, T_target + 1))

Rebuild restores K/V only: it emits no output, advances no semantic frontier
and earns no fairness service; its cost is ``recompute_overhead_tokens``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from iterserve.admission.lifecycle import SUSPENDED, Lifecycle
from iterserve.admission.preemption import FallbackMode, PreemptionIntent
from iterserve.admission.readiness import ReadinessFact, ReadinessRequirement, is_runnable
from iterserve.records.preemption import PreemptionMode
from iterserve.records.receipts import (
    ForeignBinding,
    ForeignStatus,
    PreservationResult,
    ReleaseResult,
    Staleness,
    staleness,
)


class ResumeBlocker(enum.Enum):
    """Why no ticket exists yet; a request may have several."""

    CANCELLED = "cancelled"
    NOT_SUSPENDED = "not_suspended"
    STALE_INTENT = "stale_intent"
    ABORT_MODE = "abort_mode"
    RELEASE_MISSING = "release_missing"
    RELEASE_STALE = "release_stale"
    RELEASE_INFLIGHT = "release_inflight"
    RELEASE_FAILED = "release_failed"
    PRESERVATION_MISSING = "preservation_missing"
    PRESERVATION_STALE = "preservation_stale"
    PRESERVATION_INFLIGHT = "preservation_inflight"
    PRESERVATION_FAILED = "preservation_failed"  # fallback REMAIN_SUSPENDED
    FALLBACK_ABORT = "fallback_abort"
    FOREIGN_NOT_READY = "foreign_not_ready"


@dataclass(frozen=True, slots=True)
class ResumeTicket:
    """Permission to rebuild and continue one suspended request generation."""

    binding: ForeignBinding
    semantic_target_tokens: int
    ready_prefix_tokens: int
    matched_receipts: tuple[str, ...]
    used_fallback: FallbackMode | None = None

    @property
    def rebuild_interval(self) -> tuple[int, int]:
        return self.ready_prefix_tokens, self.semantic_target_tokens

    @property
    def ordinary_next_frontier(self) -> int:
        return self.semantic_target_tokens

    @property
    def recompute_overhead_tokens(self) -> int:
        return self.semantic_target_tokens - self.ready_prefix_tokens


@dataclass(frozen=True, slots=True)
class ResumeBlocked:
    """No ticket: the blockers say which facts are missing, stale or failed."""

    binding: ForeignBinding
    blockers: tuple[ResumeBlocker, ...]


def derive_resume_ticket(current: ForeignBinding, lifecycle: Lifecycle, intent: PreemptionIntent,
                         release: ReleaseResult | None,
                         preservation: PreservationResult | None = None,
                         facts: Sequence[ReadinessFact] = (),
                         required: Sequence[ReadinessRequirement] = (),
                         exact_prefix_tokens: int = 0) -> ResumeTicket | ResumeBlocked:
    """A ticket when every fact for ``current`` is in, else the blockers.

    ``exact_prefix_tokens`` is an exact prefix M5.3 reuses on re-allocation
    (e.g. a prefix-cache hit); preserved K/V may extend it.
    """
    blockers: list[ResumeBlocker] = []
    if lifecycle is Lifecycle.CANCELLED:
        blockers.append(ResumeBlocker.CANCELLED)
    elif lifecycle not in SUSPENDED and lifecycle is not Lifecycle.RESUME_PENDING:
        blockers.append(ResumeBlocker.NOT_SUSPENDED)
    if staleness(intent.binding, current) is not Staleness.CURRENT:
        blockers.append(ResumeBlocker.STALE_INTENT)
    if intent.mode is PreemptionMode.ABORT:
        blockers.append(ResumeBlocker.ABORT_MODE)
    blockers.extend(_release_blockers(release, current))
    preserved_tokens, fallback, preservation_blockers = _preserved_prefix(
        intent, preservation, current)
    blockers.extend(preservation_blockers)
    if not is_runnable(current, facts, required):
        blockers.append(ResumeBlocker.FOREIGN_NOT_READY)
    if blockers:
        return ResumeBlocked(current, tuple(blockers))
    ready_tokens = max(preserved_tokens, exact_prefix_tokens)
    if not 0 <= ready_tokens <= intent.semantic_target_tokens:
        raise ValueError(f"ready prefix {ready_tokens} outside [0, T_target="
                         f"{intent.semantic_target_tokens}]")
    receipts = ["release"]
    if preservation is not None and preservation.status is ForeignStatus.READY:
        receipts.append("preservation")
    receipts.extend(f"{f.kind.value}" if f.layer_index is None
                    else f"{f.kind.value}[{f.layer_index}]" for f in facts
                    if f.binding == current)
    return ResumeTicket(current, intent.semantic_target_tokens, ready_tokens, tuple(receipts),
                        fallback)


def _release_blockers(release: ReleaseResult | None,
                      current: ForeignBinding) -> list[ResumeBlocker]:
    if release is None:
        return [ResumeBlocker.RELEASE_MISSING]
    if staleness(release.binding, current) is not Staleness.CURRENT:
        return [ResumeBlocker.RELEASE_STALE]
    return {ForeignStatus.READY: [], ForeignStatus.INFLIGHT: [ResumeBlocker.RELEASE_INFLIGHT],
            ForeignStatus.FAILED: [ResumeBlocker.RELEASE_FAILED]}[release.status]


def _preserved_prefix(intent: PreemptionIntent, preservation: PreservationResult | None,
                      current: ForeignBinding
                      ) -> tuple[int, FallbackMode | None, list[ResumeBlocker]]:
    """``(exact preserved tokens, fallback taken, blockers)`` for the intent's mode."""
    if intent.mode is not PreemptionMode.SWAP:
        return 0, None, []
    if preservation is None:
        return 0, None, [ResumeBlocker.PRESERVATION_MISSING]
    if staleness(preservation.binding, current) is not Staleness.CURRENT:
        return 0, None, [ResumeBlocker.PRESERVATION_STALE]
    if preservation.status is ForeignStatus.READY:
        return preservation.exact_ready_prefix_tokens, None, []
    if preservation.status is ForeignStatus.INFLIGHT:
        return 0, None, [ResumeBlocker.PRESERVATION_INFLIGHT]
    if intent.fallback is FallbackMode.RECOMPUTE:  # failed: explicit fallback, never "ready"
        return 0, FallbackMode.RECOMPUTE, []
    if intent.fallback is FallbackMode.ABORT:
        return 0, None, [ResumeBlocker.FALLBACK_ABORT]
    return 0, None, [ResumeBlocker.PRESERVATION_FAILED]
