"""Earliest deadline first (0x07).

Urgency is the request's current deadline (first-token deadline from
original arrival, else next-token deadline from the previous output; see
:mod:`iterserve.policies.deadline`). A running request that does not fit the
KV ledger preempts the least urgent running requests, itself included, in
the run's preemption mode; preserved requests resume in rank order when
their rows fit. Deadline order proves no fairness property (0x09A owns that).
"""

from __future__ import annotations

from iterserve.plan import PolicyContract
from iterserve.policies.deadline import DeadlineOrderedPolicy
from iterserve.policies.deadline_clock import DecisionClock, deadline_s
from iterserve.records.spec import SloTargets
from iterserve.records.view import RequestView


class EarliestDeadlineFirst(DeadlineOrderedPolicy):
    """EDF: urgency is the current deadline (0x07). The cost model only
    fixes the iteration clock's length; EDF predicts nothing."""

    policy_id = "edf"
    contract_template = PolicyContract.parse("""
        granularity: iteration, token interval
        protected_identity: request_id + generation + snapshot_version
        visible_state: arrival, last output time, declared SLO limits, frontiers, KV facts
        decision_output: ready work by earliest deadline; admissions; recompute preemption
        unknown_future: output lengths
        objective: meet first-token and next-token deadlines
        metric: offered-load SLO attainment (0x07)
        assumptions: deadlines from original arrival / previous output, never reset; clock scale:
            {model}; no fairness property
        foreign_owners: KV allocator (capacity facts); client SLO declarations
        source: spec 0x07 deadline ordering (SCORPIO-style); not a runtime reproduction
        denominator: offered requests in the observation window (rejected and unfinished count)
        premises: EDF optimality needs preemptive single-server unit work; batched iterations break it,
            so no optimality is transferred
        evidence_class: simulated or measured here (iterserve); never source-reported
        source_version: spec M5.2 0x07; SCORPIO-style ordering, no release pinned
        non_claims: not SCORPIO's runtime; no optimality, no fairness, no calibrated latency
    """)

    def urgency(self, view: RequestView, slo: SloTargets | None, clock: DecisionClock) -> float:
        return deadline_s(view, slo, clock.seconds_per_unit)
