"""The four-part foreign binding and the receipts bound to it (0x0C).

Generation and snapshot digest protect logical request state; the
suspension epoch closes the ABA hole (preempted at epoch 10, resumed,
preempted again at epoch 11: a delayed epoch-10 receipt must not satisfy
epoch 11). A receipt is current only when all four fields match. A stale
receipt may still drive idempotent physical cleanup, but it never makes a
request runnable, creates a resume ticket or publishes capacity.

``ReleaseResult`` (M5.3) and ``PreservationResult`` (M5.5) are the memory
owner's facts answering a preemption: the engine's KV residency returns
them, an :class:`~iterserve.records.result.IterationResult` carries the
preservation receipts and the pure transition consumes them
(PREEMPT_PENDING -> SUSPENDED_PRESERVED once a current READY preservation
arrives, which may be iterations after the intent). They live in records
because the transition does. No record here holds block ids, copy streams,
host addresses or placement.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass

from iterserve.records.plan import IntentKind, IterationPlan
from iterserve.records.state import SchedulerState
from iterserve.records.view import RequestView


@dataclass(frozen=True, slots=True)
class ForeignBinding:
    """``(request_id, generation, snapshot_digest, suspension_epoch)``.

    ``snapshot_digest`` is the M5.1 snapshot identity (the spec's
    ``snapshot_sha256``); ``suspension_epoch`` is monotone per request attempt.
    """

    request_id: str
    generation: int
    snapshot_digest: str
    suspension_epoch: int

    def __post_init__(self) -> None:
        if not self.request_id or not self.snapshot_digest:
            raise ValueError("a binding needs a request id and a snapshot digest")
        if self.generation < 0 or self.suspension_epoch < 0:
            raise ValueError("generation and suspension_epoch must be >= 0")

    def __str__(self) -> str:
        return (f"{self.request_id}:{self.generation}@{self.snapshot_digest[:12]}"
                f"#e{self.suspension_epoch}")


class Staleness(enum.Enum):
    """How a receipt's binding relates to the request's current binding."""

    CURRENT = "current"
    STALE_GENERATION = "stale_generation"  # e.g. cancellation published g + 1
    STALE_EPOCH = "stale_epoch"  # an earlier suspension of the same generation
    STALE_DIGEST = "stale_digest"  # same generation and epoch, other snapshot


class BindingMismatchError(ValueError):
    """The receipt names another request, or a generation/epoch not yet published."""


def staleness(receipt: ForeignBinding, current: ForeignBinding) -> Staleness:
    """Classify ``receipt`` against ``current``; raises on impossible (future) bindings."""
    if receipt.request_id != current.request_id:
        raise BindingMismatchError(f"receipt for {receipt} checked against {current}")
    if receipt.generation != current.generation:
        if receipt.generation > current.generation:
            raise BindingMismatchError(f"receipt {receipt} is from a future generation")
        return Staleness.STALE_GENERATION
    if receipt.suspension_epoch != current.suspension_epoch:
        if receipt.suspension_epoch > current.suspension_epoch:
            raise BindingMismatchError(f"receipt {receipt} is from a future suspension epoch")
        return Staleness.STALE_EPOCH
    if receipt.snapshot_digest != current.snapshot_digest:
        return Staleness.STALE_DIGEST
    return Staleness.CURRENT


def is_stale(receipt: ForeignBinding, current: ForeignBinding) -> bool:
    """True when the receipt must not schedule work for ``current``."""
    return staleness(receipt, current) is not Staleness.CURRENT


def snapshot_digest(request_id: str, generation: int, num_prompt_tokens: int,
                    num_emitted: int) -> str:
    """sha256 of one request generation's semantic snapshot: its id,
    generation, prompt length and emitted outputs, which fix the token
    history and the frozen frontier T_target = p + e - 1 (0x0C). It changes
    with the snapshot (every emitted output), so a receipt bound to an
    earlier snapshot of the same generation and epoch is STALE_DIGEST; a
    request that resumes without changing its semantic frontier keeps its
    digest (the spec's ABA case, which the suspension epoch closes).
    Computed rows are left out: a rebuild or a prefix claim moves them
    without changing the logical state."""
    text = f"{request_id}\x00{generation}\x00{num_prompt_tokens}\x00{num_emitted}"
    return hashlib.sha256(text.encode()).hexdigest()


class ForeignStatus(enum.Enum):
    READY = "ready"
    INFLIGHT = "inflight"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ReleaseResult:
    """M5.3 fact: the request's device blocks were (or were not yet) released.

    ``reclaimed_bytes`` is meaningful only when READY and must be 0 otherwise.
    """

    binding: ForeignBinding
    status: ForeignStatus
    reclaimed_bytes: int = 0

    def __post_init__(self) -> None:
        if self.reclaimed_bytes < 0 or (self.status is not ForeignStatus.READY
                                        and self.reclaimed_bytes):
            raise ValueError("only a READY release reclaims bytes")


@dataclass(frozen=True, slots=True)
class PreservationResult:
    """M5.5 fact: how many leading tokens of exact K/V are preserved and ready."""

    binding: ForeignBinding
    status: ForeignStatus
    exact_ready_prefix_tokens: int = 0

    def __post_init__(self) -> None:
        if self.exact_ready_prefix_tokens < 0 or (self.status is not ForeignStatus.READY
                                                  and self.exact_ready_prefix_tokens):
            raise ValueError("only a READY preservation reports a ready prefix")


def binding_of(view: RequestView, suspension_epoch: int | None = None) -> ForeignBinding:
    """The binding facts and receipts for ``view`` must name: generation,
    snapshot digest and suspension epoch (``suspension_epoch`` overrides the
    view's, e.g. the epoch a preemption is about to open), never the per-step
    snapshot version (which changes every iteration)."""
    digest = snapshot_digest(view.request_id, view.generation, view.num_prompt_tokens,
                             view.num_emitted)
    epoch = view.suspension_epoch if suspension_epoch is None else suspension_epoch
    return ForeignBinding(view.request_id, view.generation, digest, epoch)


def preserved_at_once(plan: IterationPlan, state: SchedulerState,
                      failed_ids: frozenset[str] | set[str]) -> tuple[PreservationResult, ...]:
    """The READY receipts of a memory owner that preserves synchronously:
    one per preserve intent of ``plan`` that did not fail, bound to the
    suspension epoch the intent opens, preserving every computed row. The
    decision log leaves these out of a result (they follow from its plan)
    and the codec restores them, so logs of synchronous runs stay as they
    were before receipts existed."""
    receipts = []
    for intent in plan.intents:
        if intent.kind is IntentKind.PREEMPT_PRESERVE_EXACT and intent.request_id not in failed_ids:
            view = state.views[intent.request_id]
            binding = binding_of(view, view.suspension_epoch + 1)
            receipts.append(PreservationResult(binding, ForeignStatus.READY, view.num_computed))
    return tuple(receipts)
