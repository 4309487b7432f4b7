"""Prefill-first baseline: prefill and rebuild rows before decode rows (0x09).

Under persistent prefill pressure it gives decodes zero rows (0x09
counterexample). A teaching baseline, not a production policy.
"""

from __future__ import annotations

from iterserve.plan import PolicyContract
from iterserve.policies.policy import KEY_ORDERED_BASELINE, PRIORITY_THEN_FCFS, PolicyBase


class PrefillFirst(PolicyBase):
    policy_id = "prefill-first"
    tie_break_key = ("prefill_first_rank", *PRIORITY_THEN_FCFS)
    contract = PolicyContract.parse("""
        decision_output: prefill chunks first, then decode rows in key order
        objective: TTFT
        metric: TTFT; decode starvation under persistent pressure (0x09)
        source: spec 0x09 starvation counterexample
    """, base=KEY_ORDERED_BASELINE)
