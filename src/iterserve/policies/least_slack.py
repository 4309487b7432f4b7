"""Least predicted slack first (0x07 "Deadline, Headroom, And Predicted Slack").

    slack = deadline - predicted finish = headroom - predicted cost

under a *named* cost model (its ``model_id`` is in the contract's
assumptions). The predicted cost is the 0x07 exclusive-service lower bound
(:func:`iterserve.metrics.slack.predicted_slack`): a request waiting for its
first token needs its remaining prompt rows in chunks of at most the token
budget; a live stream needs one decode iteration. A request rebuilding after
a recompute preemption (0x0C) also needs its rebuild rows first, so they are
added to its cost. Negative slack means the endpoint is infeasible even
under that optimistic model; positive slack is no guarantee.

Requests rank by slack + now = deadline - predicted cost (their latest
start): ``now`` is the same for every request of one decision, so the order
is slack's, and it does not move while a request waits (its remaining rows
do not change): the waiting queue's order is kept across decisions
(:class:`~iterserve.plan.kept_order.KeptOrder`).

Ties (latest starts equal to 1 ns) break on next token before first token, then
arrival, then request id (the 0x07 burst's declared order). Least slack
proves no fairness property: a class with loose deadlines can starve (0x09A).
"""

from __future__ import annotations

import math

from iterserve.metrics.slack import exclusive_endpoint_cost_s, predicted_slack
from iterserve.metrics.slo import SloConfig
from iterserve.plan import PolicyContract
from iterserve.policies.deadline import DeadlineOrderedPolicy
from iterserve.policies.deadline_clock import DecisionClock
from iterserve.records.spec import SloTargets
from iterserve.records.view import RequestView


class LeastSlack(DeadlineOrderedPolicy):
    """Urgency is predicted slack in seconds (smaller is more urgent)."""

    policy_id = "least-slack"
    contract_template = PolicyContract.parse("""
        granularity: iteration, token interval
        protected_identity: request_id + generation + snapshot_version
        visible_state: arrival, last output time, declared SLO limits, frontiers, KV facts
        decision_output: ready work by least predicted slack; admissions; recompute preemption
        unknown_future: output lengths (the model predicts one endpoint, never a length)
        objective: meet first-token and next-token deadlines
        metric: offered-load SLO attainment (0x07)
        assumptions: cost model {model}: exclusive-service lower bound, not calibrated; deadlines
            from original arrival / previous output; no fairness property
        foreign_owners: KV allocator (capacity facts); client SLO declarations
        source: spec 0x07 select_least_slack; SCORPIO-style slack; not a runtime reproduction
        denominator: offered requests in the observation window (rejected and unfinished count)
        premises: slack is exact only under the named cost model's exclusive-service lower bound
        evidence_class: simulated or measured here (iterserve); never source-reported
        source_version: spec M5.2 0x07 select_least_slack; no release pinned
        non_claims: not SCORPIO's runtime; no optimality, no fairness, no calibrated latency
    """)

    def urgency(self, view: RequestView, slo: SloTargets | None, clock: DecisionClock) -> float:
        """Slack plus ``now``: the latest start, deadline - predicted cost.
        ``now`` is common to every request of a decision, so this orders as
        slack does, and a waiting request's rank stays put while it waits."""
        if slo is None or (slo.ttft_ms is None and slo.tbt_ms is None):
            return math.inf
        seconds = clock.seconds_per_unit
        last = view.last_output_time
        estimate = predicted_slack(
            0.0,  # slack from time 0 (module doc)
            arrival_s=view.arrival * seconds,
            last_emission_s=None if last is None else last * seconds,
            num_outputs_emitted=view.num_emitted,
            num_prompt_rows_remaining=view.remaining_rows if view.is_prefill else 0,
            slo=SloConfig(ttft_ms=slo.ttft_ms, tbt_ms=slo.tbt_ms),
            cost_model=clock.cost_model,
            max_prefill_rows_per_iteration=clock.max_prefill_rows,
        )
        if not view.is_rebuilding:
            return estimate.slack_s
        rebuild_s = exclusive_endpoint_cost_s(
            clock.cost_model, num_outputs_emitted=0, num_prompt_rows_remaining=view.remaining_rows,
            max_prefill_rows_per_iteration=clock.max_prefill_rows)
        return estimate.slack_s - rebuild_s
