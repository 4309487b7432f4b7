"""ORCA Algorithm 1 (0x03): iteration-level FCFS with a max_tokens reservation
against n_slots (``capacity.kv_rows``), the arrival-order ``break``, and max_bs.

R runs with max_tokens 10. O (older, max_tokens 16) cannot fit next to it
in 20 slots; Y (younger, max_tokens 5) could, but must not be admitted past
O. When R finishes its reservation is released and O is admitted first.
"""

from __future__ import annotations

from policy_helpers import manifest_of, run_engine

from iterserve.policies.orca import max_tokens
from iterserve.records.plan import IntentKind
from iterserve.records.spec import Capacity, RequestSpec

N_SLOTS = 20
RUN = RequestSpec("R", 0.0, 2, 8)  # max_tokens 10
OLD = RequestSpec("O", 1.0, 4, 12)  # max_tokens 16: 10 + 16 > 20
YOUNG = RequestSpec("Y", 1.0, 1, 4)  # max_tokens 5:  10 + 5 <= 20, 16 + 5 > 20
REALIZED = {"R": 3, "O": 2, "Y": 1}


def admitted_at(recorder) -> dict[str, int]:
    """request id -> decision id of the plan that admitted it."""
    out = {}
    for state, plan, _, _ in recorder.steps:
        for intent in plan.intents:
            if intent.kind is IntentKind.ADMIT:
                out[intent.request_id] = state.decision_id
    return out


def finished_at(recorder) -> dict[str, int]:
    out = {}
    for state, _, _, successor in recorder.steps:
        for rid in successor.finished:
            out.setdefault(rid, state.decision_id)
    return out


def orca_run(requests):
    capacity = Capacity(max_num_batched_tokens=16, max_num_seqs=8, kv_rows=N_SLOTS)
    manifest = manifest_of(requests, capacity, {r.request_id: REALIZED[r.request_id]
                                                for r in requests}, "orca-break")
    engine, recorder = run_engine(manifest, "orca", max_iterations=50)
    assert engine.is_done
    return recorder


def test_older_initiation_request_blocks_younger_one_that_fits() -> None:
    recorder = orca_run([RUN, OLD, YOUNG])
    admitted, finished = admitted_at(recorder), finished_at(recorder)
    blocked = [state for state, _, _, _ in recorder.iterations
               if "R" in state.running and {"O", "Y"} <= set(state.waiting)]
    assert blocked, "O and Y never waited next to a running R"
    for state in blocked:
        reserved = sum(max_tokens(state.view(rid)) for rid in state.running)
        assert reserved + max_tokens(state.view("O")) > N_SLOTS
        assert reserved + max_tokens(state.view("Y")) <= N_SLOTS  # Y alone would fit
        assert admitted.get("Y") != state.decision_id, "Y skipped past the older O"
        assert admitted.get("O") != state.decision_id
    assert admitted["O"] == finished["R"] + 1, "O is admitted as soon as R's reservation is released"
    assert admitted["Y"] > admitted["O"]
    assert admitted["Y"] > finished["O"], "16 + 5 > 20: Y waits for O to leave"


def test_without_the_older_request_the_younger_one_is_admitted_at_once() -> None:
    """Control: it is O's reservation, not R's, that holds Y back."""
    recorder = orca_run([RUN, YOUNG])
    admitted, finished = admitted_at(recorder), finished_at(recorder)
    assert admitted["Y"] < finished["R"]


def test_reservation_never_exceeds_n_slots() -> None:
    recorder = orca_run([RUN, OLD, YOUNG])
    for _, _, _, successor in recorder.steps:
        reserved = sum(max_tokens(successor.view(rid)) for rid in successor.running)
        assert reserved <= N_SLOTS


def test_max_batch_size_is_respected() -> None:
    requests = [RequestSpec(f"q{i}", 0.0, 1, 6) for i in range(5)]
    capacity = Capacity(max_num_batched_tokens=16, max_num_seqs=8, kv_rows=1000)
    manifest = manifest_of(requests, capacity, {r.request_id: 6 for r in requests}, "orca-max-bs",
                           {"max_num_seqs": 2})
    engine, recorder = run_engine(manifest, "orca", max_iterations=100)
    assert engine.is_done
    sizes = [len(plan.work) for _, plan, _, _ in recorder.iterations]
    assert max(sizes) == 2
    assert sizes[0] == 2
    assert all(len(state.running) + sum(i.kind is IntentKind.ADMIT for i in plan.intents) <= 2
               for state, plan, _, _ in recorder.steps)


def test_sequence_budget_bounds_the_batch_when_max_num_seqs_is_unset() -> None:
    requests = [RequestSpec(f"q{i}", 0.0, 1, 6) for i in range(5)]
    capacity = Capacity(max_num_batched_tokens=16, max_num_seqs=3, kv_rows=1000)
    manifest = manifest_of(requests, capacity, {r.request_id: 6 for r in requests}, "orca-seq")
    _, recorder = run_engine(manifest, "orca", max_iterations=100)
    assert max(len(plan.work) for _, plan, _, _ in recorder.iterations) == 3
