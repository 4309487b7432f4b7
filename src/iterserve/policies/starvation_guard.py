"""The starvation guard: liveness as a gate, around any policy (0x09A, F63).

A run-level rule, not a policy: with a horizon H (clock units), a protected
identity (client) that has been continuously eligible and without a
completed service event for at least H, and has no work in the policy's
plan, gets the next
legal interval of its oldest ready request forced into the plan, recorded
as an intent whose reason starts with :data:`GUARD_REASON` (ADMIT for a
waiting request, RESUME for a suspended one, GUARD for a running one).
Eligible means ready scheduler work: a client whose live requests all wait
on foreign readiness is not eligible, and its stretch restarts when it is
unblocked (the ledger's ``eligible_from``, F63).

The guarded plan is rebuilt through the shared mechanism: the policy's
preemptions first, then the forced intervals, then the policy's own work in
its plan order while the ledgers allow (the last items may no longer fit).

A guard that changes decisions is a new contract (0x0E: composition is not
the sum of paper names): every plan, fired or not, names the composition,
``<inner id>+starvation-guard`` at ``<inner version>+guard.<GUARD_VERSION>``,
and its contract states what it adds and that none of the inner policy's
theorems, SLO statements or results carry over. The tie-break key is the
inner policy's (its evidence orders the unforced work).
"""

from __future__ import annotations

import dataclasses
from itertools import chain

from iterserve.plan import PlanBuilder, Policy, PolicyContract
from iterserve.plan.feasibility import RunningSet
from iterserve.plan.kept_order import KeptOrder, client_arrival_key
from iterserve.policies.settings import PolicyConfigError
from iterserve.records.failures import failure_of
from iterserve.records.plan import IntentKind, IterationPlan
from iterserve.records.preemption import PreemptionCause
from iterserve.records.spec import FairnessSpec
from iterserve.records.state import SchedulerState
from iterserve.records.view import Lifecycle, RequestView

GUARD_REASON = PreemptionCause.STARVATION_GUARD.value  # a metric reads the cause off it
GUARD_ID_SUFFIX = "+starvation-guard"
GUARD_VERSION = "1"  # the forcing rule's own version, bumped when the rule changes
_PREEMPTS = (IntentKind.PREEMPT_RECOMPUTE, IntentKind.PREEMPT_PRESERVE_EXACT)


class StarvationGuard:
    """``inner`` with the guard at ``horizon`` clock units."""

    def __init__(self, inner: Policy, horizon: float) -> None:
        if not horizon > 0:
            raise PolicyConfigError(f"starvation horizon must be > 0, got {horizon}")
        self.inner = inner
        self.horizon = horizon
        self.policy_id = guarded_id(inner.policy_id)
        self.policy_version = guarded_version(inner.policy_version)
        self.tie_break_key = inner.tie_break_key
        self.contract = composed_contract(inner.policy_id, inner.contract, horizon)
        check_composition(inner, self)
        self.ledger_weights = getattr(inner, "ledger_weights", None) or FairnessSpec()
        self.uses_prefix_hits = getattr(inner, "uses_prefix_hits", False)
        # what the feasibility check reads: the guard forces work, it adds no memory path
        self.running_set = getattr(inner, "running_set", RunningSet.UNBOUNDED)
        self.whole_prompt_prefill = getattr(inner, "whole_prompt_prefill", False)
        self.config = getattr(inner, "config", None)  # the settings a log header records
        # each client's ready waiting requests in arrival order, kept across
        # decisions (the run then records the view deltas the inner policy's
        # own kept order follows too)
        self.keeps_order = True
        self.kept_by_client = KeptOrder()

    def choose(self, state: SchedulerState) -> IterationPlan:
        plan = self.inner.choose(state)
        served = {state.views[item.request_id].client_id for item in plan.work}
        starving = [view for view in self._oldest_starving(state) if view.client_id not in served]
        if not starving:
            return dataclasses.replace(plan, policy_id=self.policy_id,
                                       policy_version=self.policy_version)
        return self._force(state, plan, starving)

    def _oldest_starving(self, state: SchedulerState) -> list[RequestView]:
        """Per starving client, its oldest ready live request (most starved
        first): the running and suspended requests are read, and each
        client's oldest ready waiting one from the kept order."""
        ledger = state.ledger
        if ledger is None:
            return []
        oldest: dict[str, RequestView] = {}
        views = state.views
        kept = self.kept_by_client
        kept.sync(state, client_arrival_key)
        firsts = (views[next(kept.group(client))[1]] for client in kept.heads())
        for view in chain(map(views.__getitem__, chain(state.running, state.suspended)), firsts):
            held = oldest.get(view.client_id)
            if view.is_ready and (held is None or view.arrival_order < held.arrival_order):
                oldest[view.client_id] = view
        unserved = {c: ledger.unserved_for(c, state.now) for c in oldest}
        starving = [c for c in oldest if unserved[c] >= self.horizon]
        return [oldest[c] for c in sorted(starving, key=lambda c: (-unserved[c], c))]

    def _force(self, state: SchedulerState, plan: IterationPlan,
               starving: list[RequestView]) -> IterationPlan:
        builder = PlanBuilder(self, state, **_ledgers(self.inner))
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


def guarded_id(inner_id: str) -> str:
    return inner_id + GUARD_ID_SUFFIX


def guarded_version(inner_version: str) -> str:
    return f"{inner_version}+guard.{GUARD_VERSION}"


def inner_identity(policy_id: str, policy_version: str) -> tuple[str, str] | None:
    """The inner policy's (id, version) of a guarded identity; None when
    ``policy_id`` names no guard composition."""
    suffix = f"+guard.{GUARD_VERSION}"
    if not policy_id.endswith(GUARD_ID_SUFFIX):
        return None
    inner_version = policy_version.removesuffix(suffix) if policy_version.endswith(suffix) \
        else policy_version
    return policy_id.removesuffix(GUARD_ID_SUFFIX), inner_version


def check_composition(inner: Policy, composed: Policy) -> None:
    """FC14 (0x0E): a composition that changes decisions must not keep the
    inner policy's id, version or theorem premises."""
    kept = [name for name, same in (
        ("id", composed.policy_id == inner.policy_id),
        ("version", composed.policy_version == inner.policy_version),
        ("premises", composed.contract.premises == inner.contract.premises
         and bool(inner.contract.premises))) if same]
    if kept:
        raise PolicyConfigError(f"{failure_of('theorem_transfer').label}: {composed.policy_id} "
                                f"keeps the inner policy's {', '.join(kept)}")


def composed_contract(inner_id: str, inner: PolicyContract, horizon: float) -> PolicyContract:
    """The composition's own K_m: the inner policy's fields with what the
    guard adds, and premises, results and claims that no longer transfer."""
    guard = f"the starvation guard (horizon {horizon:g} clock units, F63)"
    return dataclasses.replace(
        inner,
        protected_identity=f"{inner.protected_identity}; client (the guard's liveness identity)",
        visible_state=f"{inner.visible_state}; per-client time since the last completed "
                      "service event",
        decision_output=f"{inner.decision_output}; forced next legal intervals for starving "
                        "clients (GUARD, ADMIT or RESUME intents with the guard's reason)",
        objective=f"{inner.objective}, subject to no active client going unserved for the "
                  "horizon",
        metric=f"{inner.metric}; starved clients and guard firings (F63)",
        assumptions=f"composition of {inner_id} with {guard}: forcing work changes the "
                    f"inner policy's premises; no service bound is claimed",
        premises="none transferred: the inner policy's theorem premises do not hold under "
                 "forced work",
        source=f"composition (0x0E) of {inner_id} ({inner.source}) with {guard} (0x09A)",
        source_version=f"{inner.source_version}; starvation guard {GUARD_VERSION}",
        evidence_class="simulated or measured here (iterserve); never source-reported",
        non_claims=f"no theorem, SLO statement or result of {inner_id} or its source carries "
                   "over to the composition without a new proof or measurement",
        exact_runtime_reproduction=False,
    )


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
