"""0x09 starvation counterexamples under B_tok = 6 over four iterations.

Six requests are decoding (one-token prompts at t=0, long outputs) when a
64-token prompt P arrives at t=1; the same pressure persists for the four
iterations that follow. decode-first starves P, prefill-first starves the
decodes, decode-first-bounded gives both classes rows and rotates decode ids.
"""

from __future__ import annotations

from policy_helpers import manifest_of, rows_by_kind, run_engine

from iterserve.records.spec import Capacity, RequestSpec
from iterserve.records.view import WorkKind

DECODE_IDS = tuple(f"d{i}" for i in range(6))
PROMPT = "P"
NUM_ITERATIONS = 4


def four_pressured_iterations(policy_name: str):
    requests = [RequestSpec(rid, 0.0, 1, 256) for rid in DECODE_IDS]
    requests.append(RequestSpec(PROMPT, 1.0, 64, 8))
    manifest = manifest_of(requests, Capacity(max_num_batched_tokens=6, max_num_seqs=16),
                           {rid: 256 for rid in DECODE_IDS}, "m5-2-loop6-starvation")
    _, recorder = run_engine(manifest, policy_name, max_iterations=1 + NUM_ITERATIONS)
    steps = [(state, plan) for state, plan, _, _ in recorder.iterations if PROMPT in state.views]
    assert len(steps) == NUM_ITERATIONS
    for state, _ in steps:  # the pressure is real in every one of the four
        assert all(state.view(rid).is_decoding for rid in DECODE_IDS)
        assert state.view(PROMPT).is_prefill
    return steps


def test_decode_first_gives_the_waiting_prefill_zero_rows() -> None:
    for state, plan in four_pressured_iterations("decode-first"):
        rows = rows_by_kind(plan)
        assert rows[WorkKind.PREFILL_CHUNK] == 0, f"decision {state.decision_id}"
        assert rows[WorkKind.DECODE_ROW] == 6
        assert state.view(PROMPT).num_computed == 0


def test_prefill_first_gives_decodes_zero_rows() -> None:
    for state, plan in four_pressured_iterations("prefill-first"):
        rows = rows_by_kind(plan)
        assert rows[WorkKind.DECODE_ROW] == 0, f"decision {state.decision_id}"
        assert rows[WorkKind.PREFILL_CHUNK] == 6


def test_bounded_decode_first_serves_both_classes_and_rotates_decodes() -> None:
    served: set[str] = set()
    for state, plan in four_pressured_iterations("decode-first-bounded"):
        rows = rows_by_kind(plan)
        assert rows[WorkKind.PREFILL_CHUNK] >= 1, f"prefill starved at {state.decision_id}"
        assert rows[WorkKind.DECODE_ROW] >= 1, f"decodes starved at {state.decision_id}"
        assert plan.tokens_used == 6
        served |= {w.request_id for w in plan.work if w.kind is WorkKind.DECODE_ROW}
    assert served == set(DECODE_IDS), f"never rotated to {set(DECODE_IDS) - served}"
