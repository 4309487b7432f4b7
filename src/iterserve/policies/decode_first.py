"""Decode-first: ready decode rows before ready prefill (0x01A Loop 2, 0x09).

Ordered by (phase_rank, priority_rank, arrival_order, request_id,
request_generation). Under persistent decode pressure it gives waiting
prefill zero rows (0x09 counterexample); see ``decode-first-bounded``.
"""

from __future__ import annotations

from iterserve.plan import PolicyContract
from iterserve.policies.policy import KEY_ORDERED_BASELINE, PRIORITY_THEN_FCFS, PolicyBase


class DecodeFirst(PolicyBase):
    policy_id = "decode-first"
    tie_break_key = ("phase_rank", *PRIORITY_THEN_FCFS)
    contract = PolicyContract.parse("""
        decision_output: decode rows first, then prefill chunks in key order
        objective: decode cadence (TBT)
        metric: TBT; prefill starvation under persistent pressure (0x09)
        source: spec 0x01A Loop 2 fixture policy; 0x09 counterexample
    """, base=KEY_ORDERED_BASELINE)
