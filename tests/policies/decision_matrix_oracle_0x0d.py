"""The 0x0D six-policy x four-snapshot decision matrix, worked out by hand
from each policy's published rule (its source paper or vLLM's scheduler),
not from the policies' output. Each cell is the plan the rule gives on the
snapshot (:func:`decision_matrix_0x0d.snapshots`), with the reasoning.

Notation: a decoding request with prompt p and e outputs has computed
c = p + e - 1 and decodes the row [c, c+1); a waiting prompt of p rows
prefills [0, rows). Budgets: B tokens and S sequences per iteration.
"""

from __future__ import annotations

from typing import Any

DECODE, PREFILL = "DECODE_ROW", "PREFILL_CHUNK"


def _cell(work: list[list[Any]], intents: list[list[str]], why: str) -> dict[str, Any]:
    tokens = sum(end - start for _, start, end, _ in work)
    return {"expected": {"work": work, "intents": intents, "tokens_used": tokens,
                         "sequences_used": len(work)}, "why": why}


# S1: P running prefill p=10 c=4 (6 rows left); D1, D2 decoding p=2 e=1 (c=2); W waiting
# p=6. B=6, S=4. Running queue and arrival order: P, D1, D2, W.
S1 = {
    "refill": _cell([["P", 4, 10, PREFILL]], [],
                    "arrival order: P takes all 6 rows left = B; nothing left for D1, D2, W"),
    "orca": _cell([["P", 4, 10, PREFILL]], [],
                  "Algorithm 1 in arrival order: P's whole remaining prompt (6) fits B=6; "
                  "D1 then finds no token left and the scan stops"),
    "sarathi": _cell([["D1", 2, 3, DECODE], ["D2", 2, 3, DECODE], ["P", 4, 8, PREFILL]], [],
                     "decode-maximal: both decodes (2), then one prefill chunk of C=4: [4,8)"),
    "sarathi-serve": _cell([["D1", 2, 3, DECODE], ["D2", 2, 3, DECODE], ["P", 4, 8, PREFILL]],
                           [], "decodes first (2), then prefill up to tau=6: 6-2=4 rows [4,8)"),
    "vllm": _cell([["P", 4, 10, PREFILL]], [],
                  "running queue order, no phases: P catches up min(6 left, B=6) = 6; the "
                  "budget is spent, so D1 and D2 wait (no threshold set)"),
    "vllm-priority": _cell([["P", 4, 10, PREFILL]], [],
                           "priority orders waiting and victims only: the running pass is "
                           "vllm's, P takes 6"),
}

# S2 (0x0D's example): A decoding p=2 e=2 (c=3) priority 10; B decoding p=3 e=2 (c=4)
# priority 1; W waiting p=1. KV: block 1 row, 7 blocks, 0 free. B=16, S=8.
S2 = {
    "refill": _cell([], [], "A's row needs a block, none is free and refill never preempts: "
                            "A, B and W all wait"),
    "orca": _cell([], [], "n_slots = 7 rows = the pool, so no overbooking and no preemption; "
                          "A gets no block and the scan stops"),
    "sarathi": _cell([], [], "no preemption: the decodes find no block, nothing runs"),
    "sarathi-serve": _cell([["A", 3, 4, DECODE]], [["preempt_recompute", "B"]],
                           "decode pass preempts the running tail on a shortfall: B (4 "
                           "blocks) is recomputed, A decodes [3,4); no admission after a "
                           "preemption"),
    "vllm": _cell([["A", 3, 4, DECODE]], [["preempt_recompute", "B"]],
                  "0x0D FCFS: tail victim B releases its rows, A schedules one row; no "
                  "waiting pass after a running-path preemption"),
    "vllm-priority": _cell([], [["preempt_recompute", "A"]],
                           "0x0D PRIORITY: victim max(priority, arrival) = A (10 > 1): A "
                           "preempts itself, the running pass stops, no row is scheduled"),
}

# S3: D decoding p=2 e=1 (c=2); R waiting p=3 priority 1, foreign K/V not ready; X waiting
# p=3 priority 5; Y waiting p=3 priority 0 (arrival order D, R, X, Y). B=8, S=2.
S3 = {
    "refill": _cell([["D", 2, 3, DECODE], ["X", 0, 3, PREFILL]], [["admit", "X"]],
                    "D decodes; R is not ready and is passed over; X fills the last slot"),
    "orca": _cell([["D", 2, 3, DECODE]], [],
                  "FCFS scan never skips an older initiation: R cannot run yet, so the scan "
                  "stops before X"),
    "sarathi": _cell([["D", 2, 3, DECODE], ["X", 0, 3, PREFILL]], [["admit", "X"]],
                     "D decodes; R not ready; X's 3 rows fit the chunk C=4"),
    "sarathi-serve": _cell([["D", 2, 3, DECODE], ["X", 0, 3, PREFILL]], [["admit", "X"]],
                           "D decodes; R not ready; X's 3 rows fit tau-1 = 5"),
    "vllm": _cell([["D", 2, 3, DECODE], ["X", 0, 3, PREFILL]], [["admit", "X"]],
                  "FCFS waiting: R waits for remote K/V (skipped, 0x0D), X admitted; "
                  "max_num_seqs=2 reached"),
    "vllm-priority": _cell([["D", 2, 3, DECODE], ["Y", 0, 3, PREFILL]], [["admit", "Y"]],
                           "waiting by (priority, arrival): Y (0) first, admitted; the slot "
                           "limit stops R and X"),
}

# S4: D1, D2 decoding p=3 e=2 (c=4); W waiting p=7, max_output 4. B=8, S=3.
S4 = {
    "refill": _cell([["D1", 4, 5, DECODE], ["D2", 4, 5, DECODE], ["W", 0, 6, PREFILL]],
                    [["admit", "W"]], "decodes (2), W chunked to the 6 tokens left"),
    "orca": _cell([["D1", 4, 5, DECODE], ["D2", 4, 5, DECODE]], [],
                  "whole-prompt prefill: W's 7 rows exceed the 6 tokens left, the scan stops"),
    "sarathi": _cell([["D1", 4, 5, DECODE], ["D2", 4, 5, DECODE], ["W", 0, 4, PREFILL]],
                     [["admit", "W"]], "decodes (2), one chunk of C=4 of W"),
    "sarathi-serve": _cell([["D1", 4, 5, DECODE], ["D2", 4, 5, DECODE], ["W", 0, 4, PREFILL]],
                           [["admit", "W"]], "decodes (2), W up to tau-2 = 4 rows"),
    "vllm": _cell([["D1", 4, 5, DECODE], ["D2", 4, 5, DECODE], ["W", 0, 6, PREFILL]],
                  [["admit", "W"]],
                  "running first (2), W admitted with min(7, 6 left) = 6; no KV limit, so "
                  "the whole-sequence check passes"),
    "vllm-priority": _cell([["D1", 4, 5, DECODE], ["D2", 4, 5, DECODE], ["W", 0, 6, PREFILL]],
                           [["admit", "W"]], "one waiting request: as vllm"),
}

ORACLE: dict[str, dict[str, dict[str, Any]]] = {
    "S1_prefill_vs_decode": S1,
    "S2_kv_exhausted_priority": S2,
    "S3_foreign_not_ready": S3,
    "S4_long_prompt_behind_decodes": S4,
}


def expected_matrix() -> dict[str, dict[str, dict[str, Any]]]:
    """The hand-derived cells without their reasoning."""
    return {name: {policy: cell["expected"] for policy, cell in row.items()}
            for name, row in ORACLE.items()}
