"""The 0x0D six-policy x four-snapshot decision matrix, rebuilt as the
smallest snapshots that activate each policy difference (the evidence
files 0x0D names do not exist here). Each cell is the policy's real plan
on the snapshot: work intervals, queue intents and budget use; the test
compares it with the cells worked out by hand in decision_matrix_oracle_0x0d."""

from __future__ import annotations

from typing import Any

from policy_helpers import decoding_view, state_of, waiting_view

from iterserve.policies.registry import make_policy
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.records.view import Lifecycle, RequestView

#: policy -> the settings the matrix makes it with
POLICIES: dict[str, dict[str, int]] = {
    "refill": {},
    "orca": {},
    "sarathi": {"chunk_size": 4},
    "sarathi-serve": {"tau": 6},
    "vllm": {},
    "vllm-priority": {},
}


def partial_prefill(request_id: str, order: int, *, num_prompt: int, num_computed: int,
                    priority: int = 0) -> RequestView:
    view = waiting_view(request_id, order, num_prompt=num_prompt, priority=priority)
    return view._replace(lifecycle=Lifecycle.RUNNING, snapshot_version=5,
                         num_computed=num_computed, num_committed=num_computed)


def snapshots() -> dict[str, SchedulerState]:
    """S1: a partial prefill ahead of two decodes under a 6-row budget
    (phase order vs queue order vs one chunk). S2: zero free KV rows,
    running [A (priority 10), B (priority 1)] (FCFS tail vs priority
    victim, 0x0D). S3: the oldest waiting request's foreign K/V is not
    ready and one sequence slot is left (skip it; FCFS vs priority order).
    S4: a seven-row prompt behind two decodes under an 8-row budget (chunk
    to the budget vs one chunk of C vs tau vs ORCA's reservation)."""
    s1 = state_of([partial_prefill("P", 0, num_prompt=10, num_computed=4),
                   decoding_view("D1", 1, num_prompt=2, num_emitted=1),
                   decoding_view("D2", 2, num_prompt=2, num_emitted=1),
                   waiting_view("W", 3, num_prompt=6)], max_num_batched_tokens=6, max_num_seqs=4)
    s2 = state_of([decoding_view("A", 0, num_prompt=2, num_emitted=2, priority=10),
                   decoding_view("B", 1, num_prompt=3, num_emitted=2, priority=1),
                   waiting_view("W", 2, num_prompt=1)], max_num_batched_tokens=16, max_num_seqs=8,
                  capacity=CapacityFacts(block_size=1, num_blocks_total=7, num_blocks_free=0))
    remote = waiting_view("R", 1, num_prompt=3, priority=1)._replace(is_ready=False)
    s3 = state_of([decoding_view("D", 0, num_prompt=2, num_emitted=1), remote,
                   waiting_view("X", 2, num_prompt=3, priority=5),
                   waiting_view("Y", 3, num_prompt=3, priority=0)], max_num_batched_tokens=8,
                  max_num_seqs=2)
    s4 = state_of([decoding_view("D1", 0, num_prompt=3, num_emitted=2),
                   decoding_view("D2", 1, num_prompt=3, num_emitted=2),
                   waiting_view("W", 2, num_prompt=7, max_output_tokens=4)], max_num_batched_tokens=8,
                  max_num_seqs=3)
    return {"S1_prefill_vs_decode": s1, "S2_kv_exhausted_priority": s2,
            "S3_foreign_not_ready": s3, "S4_long_prompt_behind_decodes": s4}


def cell(policy_name: str, state: SchedulerState) -> dict[str, Any]:
    plan = make_policy(policy_name, **POLICIES[policy_name]).choose(state)
    return {
        "work": [[w.request_id, w.start, w.end, w.kind.value] for w in plan.work],
        "intents": [[i.kind.value, i.request_id] for i in plan.intents],
        "tokens_used": plan.tokens_used,
        "sequences_used": plan.sequences_used,
    }


def decision_matrix() -> dict[str, dict[str, Any]]:
    states = snapshots()
    return {name: {policy: cell(policy, state) for policy in POLICIES}
            for name, state in states.items()}
