"""The memory owner's ledger of suspended requests: intents, receipts and
resume tickets on the runtime path (0x0C).

Each preempt intent a plan carries becomes a
:class:`~iterserve.admission.preemption.PreemptionIntent` bound to the
suspension epoch it opens, with T_target frozen; the receipts that answer it
(release, preservation) are kept beside it. When a later plan resumes the
request (a RESUME of a suspended one, or the ADMIT of a recompute victim
back in waiting, vLLM's shape), :func:`derive_resume_ticket` must grant a
ticket from those facts for the request's current binding: a blocked
ticket makes the resume a failure fact, and the resumed work must start at
the ticket's T_ready (the rebuild interval is [T_ready, T_target)). Both
executors reach this ledger through :class:`~iterserve.engine.kv_residency.KvResidency`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from iterserve.admission.preemption import PreemptionIntent, PreemptionReason
from iterserve.admission.resume import ResumeBlocked, ResumeTicket, derive_resume_ticket
from iterserve.records import frontier
from iterserve.records.plan import IterationPlan, QueueIntent, preemption_mode_of
from iterserve.records.preemption import (
    FallbackMode,
    PreemptionCause,
    PreemptionMode,
    preemption_cause_of,
)
from iterserve.records.receipts import (
    ForeignBinding,
    PreservationResult,
    ReleaseResult,
    binding_of,
)
from iterserve.records.view import Lifecycle, RequestView

_REASONS = {PreemptionCause.KV_EXHAUSTED: PreemptionReason.KV_CAPACITY,
            # the extension waited its bound on a release in flight (0x06): denied
            PreemptionCause.EXTENSION_WAIT_BOUND: PreemptionReason.KV_CAPACITY,
            PreemptionCause.STARVATION_GUARD: PreemptionReason.FAIRNESS,
            PreemptionCause.OTHER: PreemptionReason.OPERATOR}


@dataclass(frozen=True, slots=True)
class Suspension:
    """One suspended request generation: its intent and the receipts so far."""

    intent: PreemptionIntent
    release: ReleaseResult | None = None
    preservation: PreservationResult | None = None


class SuspensionLedger:
    """Intents and receipts per suspended request; tickets on resume."""

    def __init__(self) -> None:
        self._open: dict[str, Suspension] = {}
        self.tickets: list[ResumeTicket] = []
        self.num_blocked = 0

    def suspend(self, plan: IterationPlan, intent: QueueIntent, view: RequestView,
                binding: ForeignBinding, fallback: FallbackMode) -> None:
        """Record the policy intent of a preemption (recompute or preserve)."""
        mode = preemption_mode_of(intent.kind)
        assert mode is not None
        if mode is PreemptionMode.RECOMPUTE:  # a recompute victim waits for its turn
            fallback = FallbackMode.REMAIN_SUSPENDED
        record = PreemptionIntent(
            f"d{plan.decision_id}:{view.request_id}", binding, mode, fallback,
            frontier.frozen_target(view.num_prompt_tokens, view.num_emitted, view.num_computed),
            _REASONS[preemption_cause_of(intent.reason)], plan.policy_id,
            plan.decision_id)
        self._open[view.request_id] = Suspension(record)

    def on_release(self, release: ReleaseResult) -> None:
        held = self._open.get(release.binding.request_id)
        if held is not None:
            self._open[release.binding.request_id] = replace(held, release=release)

    def on_preservation(self, receipt: PreservationResult) -> None:
        held = self._open.get(receipt.binding.request_id)
        if held is not None:
            self._open[receipt.binding.request_id] = replace(held, preservation=receipt)

    def lose_preserved_rows(self, request_id: str) -> None:
        """A failed preservation that remains suspended (0x0C fallback): its
        K/V is gone, so a later resume is a recompute of [0, T_target)."""
        held = self._open.get(request_id)
        if held is not None:
            intent = replace(held.intent, mode=PreemptionMode.RECOMPUTE,
                             fallback=FallbackMode.REMAIN_SUSPENDED)
            self._open[request_id] = Suspension(intent, held.release)

    def is_suspended(self, request_id: str) -> bool:
        return request_id in self._open

    def resume(self, view: RequestView) -> ResumeTicket | ResumeBlocked:
        """The ticket for resuming ``view`` now, or why there is none; the
        suspension closes when a ticket is granted."""
        held = self._open[view.request_id]
        lifecycle = view.lifecycle
        if lifecycle is Lifecycle.WAITING and held.intent.mode is PreemptionMode.RECOMPUTE:
            lifecycle = Lifecycle.SUSPENDED_RECOMPUTE  # vLLM keeps it in waiting (0x0D)
        ticket = derive_resume_ticket(binding_of(view), lifecycle, held.intent, held.release,
                                      held.preservation)
        if isinstance(ticket, ResumeTicket):
            del self._open[view.request_id]
            self.tickets.append(ticket)
        else:
            self.num_blocked += 1
        return ticket

    def forget(self, request_id: str) -> None:
        self._open.pop(request_id, None)

    @property
    def recompute_overhead_tokens(self) -> int:
        """Rows rebuilt across every ticket: runtime cost, never service (0x0C)."""
        return sum(ticket.recompute_overhead_tokens for ticket in self.tickets)
