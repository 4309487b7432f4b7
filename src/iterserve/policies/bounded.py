"""Bounded decode-first (0x09): rotate decode ids, reserve one prefill row.

When prefill (or rebuild) work exists, decodes get at most B_tok - 1 rows,
chosen by rotating the decode ids (offset = decision_id mod n), and the
oldest prefill gets the rest. Both classes progress under pressure. A
counterexample fix, not a production policy: it proves no latency bound.
"""

from __future__ import annotations

from iterserve.plan import PlanBuilder, PolicyContract, views_of
from iterserve.policies.policy import PolicyBase
from iterserve.records.state import SchedulerState


class BoundedDecodeFirst(PolicyBase):
    policy_id = "decode-first-bounded"
    tie_break_key: tuple[str, ...] = ("phase_rank", "arrival_order", "request_id",
                                      "request_generation")
    contract = PolicyContract.parse("""
        granularity: iteration, token interval
        protected_identity: request_id + generation + snapshot_version
        visible_state: frontiers, arrival order, decision id (rotation)
        decision_output: rotated decode rows, one reserved prefill row or more
        unknown_future: output lengths
        objective: both classes progress under persistent pressure
        metric: rows per class per iteration (0x09)
        assumptions: no latency or fairness bound is claimed
        foreign_owners: readiness facts
        source: spec 0x09 bounded variant
        denominator: iterations of persistent pressure
        premises: none (a bounded rotation, not a theorem)
        evidence_class: simulated or measured here (iterserve); never source-reported
        source_version: spec M5.2 0x09 bounded variant
        non_claims: no latency or fairness bound; not a published method
    """)

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        live = views_of(state, state.running) + views_of(state, state.waiting)
        live.sort(key=lambda v: v.arrival_order)
        decodes = [v for v in live if v.is_decoding and v.is_ready]
        prefills = [v for v in live if not v.is_decoding and v.is_ready]
        reserve = 1 if prefills else 0
        if decodes:
            offset = state.decision_id % len(decodes)
            rotated = decodes[offset:] + decodes[:offset]
            for view in rotated[: max(builder.tokens_left - reserve, 0)]:
                if builder.seqs_left <= reserve:
                    break
                builder.add(view)
        for view in prefills:
            if not builder.can_add():
                break
            builder.take(view)
