"""The starvation guard: liveness as a gate, around any policy (0x09A, F63).

A run-level rule, not a policy: with a horizon H (clock units), a protected
identity (client) that has been active and without a completed service
event for at least H, and has no work in the policy's plan, gets the next
legal interval of its oldest ready request forced into the plan, recorded
as an intent whose reason starts with :data:`GUARD_REASON` (ADMIT for a
waiting request, RESUME for a suspended one, GUARD for a running one).

The guarded plan is rebuilt through the shared mechanism: the policy's
preemptions first, then the forced intervals, then the policy's own work in
its plan order while the ledgers allow (the last items may no longer fit).
The policy's identity and tie-break evidence are kept. A guarded run claims
no policy's service bound: forcing work changes every theorem's premises.
"""

from __future__ import annotations

import dataclasses

from iterserve.plan import PlanBuilder, Policy
from iterserve.plan.feasibility import RunningSet
from iterserve.policies.settings import PolicyConfigError
from iterserve.records.plan import IntentKind, IterationPlan
from iterserve.records.preemption import PreemptionCause
from iterserve.records.spec import FairnessSpec
from iterserve.records.state import SchedulerState
from iterserve.records.view import Lifecycle, RequestView

GUARD_REASON = PreemptionCause.STARVATION_GUARD.value  # a metric reads the cause off it
_PREEMPTS = (IntentKind.PREEMPT_RECOMPUTE, IntentKind.PREEMPT_PRESERVE_EXACT)


class StarvationGuard:
    """``inner`` with the guard at ``horizon`` clock units."""

    def __init__(self, inner: Policy, horizon: float) -> None:
        if not horizon > 0:
            raise PolicyConfigError(f"starvation horizon must be > 0, got {horizon}")
        self.inner = inner
        self.horizon = horizon
        self.policy_id = inner.policy_id
        self.policy_version = inner.policy_version
        self.tie_break_key = inner.tie_break_key
        self.contract = dataclasses.replace(
            inner.contract, assumptions=f"{inner.contract.assumptions}; run under the "
            f"starvation guard (horizon {horizon:g} clock units): no service bound is claimed")
        self.ledger_weights = getattr(inner, "ledger_weights", None) or FairnessSpec()
        self.uses_prefix_hits = getattr(inner, "uses_prefix_hits", False)
        # what the feasibility check reads: the guard forces work, it adds no memory path
        self.running_set = getattr(inner, "running_set", RunningSet.UNBOUNDED)
        self.whole_prompt_prefill = getattr(inner, "whole_prompt_prefill", False)
        self.config = getattr(inner, "config", None)  # the settings a log header records

    def choose(self, state: SchedulerState) -> IterationPlan:
        plan = self.inner.choose(state)
        served = {state.views[item.request_id].client_id for item in plan.work}
        starving = [view for view in self._oldest_starving(state) if view.client_id not in served]
        if not starving:
            return plan
        return self._force(state, plan, starving)

    def _oldest_starving(self, state: SchedulerState) -> list[RequestView]:
        """Per starving client, its oldest ready live request (most starved first)."""
        ledger = state.ledger
        if ledger is None:
            return []
        oldest: dict[str, RequestView] = {}
        for rid in state.running + state.suspended + state.waiting:
            view = state.views[rid]
            held = oldest.get(view.client_id)
            if view.is_ready and (held is None or view.arrival_order < held.arrival_order):
                oldest[view.client_id] = view
        unserved = {c: ledger.unserved_for(c, state.now) for c in oldest}
        starving = [c for c in oldest if unserved[c] >= self.horizon]
        return [oldest[c] for c in sorted(starving, key=lambda c: (-unserved[c], c))]

    def _force(self, state: SchedulerState, plan: IterationPlan,
               starving: list[RequestView]) -> IterationPlan:
        builder = PlanBuilder(self.inner, state, **_ledgers(self.inner))
        victims = set()
        for intent in plan.intents:
            view = state.views[intent.request_id]
            if intent.kind in _PREEMPTS:
                builder.preempt(view, intent.kind, intent.reason, intent.victim)
                victims.add(intent.request_id)
            elif intent.kind in (IntentKind.REJECT, IntentKind.ABORT):
                builder.intend(intent.kind, view, intent.reason)
                victims.add(intent.request_id)
        ledger = state.ledger
        for view in starving:
            if view.request_id in victims or not builder.can_add():
                continue
            unserved = 0.0 if ledger is None else ledger.unserved_for(view.client_id, state.now)
            _take(builder, view, f"{GUARD_REASON}: client {view.client_id} unserved for "
                  f"{unserved:g} >= horizon {self.horizon:g}")
        for item in plan.work:
            view = state.views[item.request_id]
            _take(builder, view, "", item.end - item.start)
        return builder.build()


def _ledgers(policy: Policy) -> dict[str, int | None]:
    """The inner policy's builder limits (PolicyBase.ledgers), if it has any."""
    ledgers = getattr(policy, "ledgers", None)
    return {} if ledgers is None else dict(ledgers())


def _take(builder: PlanBuilder, view: RequestView, reason: str,
          max_rows: int | None = None) -> None:
    if view.lifecycle is Lifecycle.WAITING:
        builder.admit(view, max_rows, reason)
    elif view.lifecycle is not Lifecycle.RUNNING:
        builder.resume(view, max_rows, reason)
    elif builder.add(view, max_rows) and reason:
        builder.intend(IntentKind.GUARD, view, reason)
