"""0x0B worked timeline: decodes A, B, C keep a row in every iteration while
D (S=4096) is prefilled as 6 x 640 + 256 under a 768-row token budget."""

from __future__ import annotations

import pytest
from policy_helpers import manifest_of, run_engine, work_of

from iterserve.records.spec import Capacity, RequestSpec
from iterserve.records.view import WorkKind

DECODES = ("A", "B", "C")
D_CHUNKS = [640] * 6 + [256]


def timeline_manifest(**knobs: int):
    """A, B, C: one-token prompts at t=0 with long outputs, so they are
    decoding before D (S=4096) and E (S=512) arrive at t=2."""
    requests = [RequestSpec(rid, 0.0, 1, 64) for rid in DECODES]
    requests += [RequestSpec("D", 2.0, 4096, 4), RequestSpec("E", 2.0, 512, 4)]
    capacity = Capacity(max_num_batched_tokens=768, max_num_seqs=8)
    return manifest_of(requests, capacity, {rid: 64 for rid in DECODES}, "m5-2-0x0b", knobs)


@pytest.mark.parametrize(
    ("policy_name", "knobs"),
    [("sarathi", {"chunk_size": 640}), ("vllm", {"long_prefill_token_threshold": 640})],
)
def test_d_is_chunked_640_while_abc_decode_every_iteration(policy_name, knobs) -> None:
    _, recorder = run_engine(timeline_manifest(**knobs), policy_name, max_iterations=16)
    d_steps = [(state, plan) for state, plan, _, _ in recorder.iterations
               if (work := work_of(plan, "D")) is not None and work.kind is WorkKind.PREFILL_CHUNK]
    widths = [work_of(plan, "D").width for _, plan in d_steps]
    assert widths == D_CHUNKS
    assert [work_of(plan, "D").start for _, plan in d_steps] == [640 * i for i in range(7)]
    decision_ids = [state.decision_id for state, _ in d_steps]
    assert decision_ids == list(range(decision_ids[0], decision_ids[0] + 7)), "D's chunks not consecutive"
    for state, plan in d_steps:
        assert plan.tokens_used <= 768
        for rid in DECODES:
            assert state.view(rid).is_decoding, f"{rid} should already be decoding"
            work = work_of(plan, rid)
            assert work is not None and work.kind is WorkKind.DECODE_ROW, (
                f"{policy_name}: {rid} got no decode row at decision {state.decision_id}")
    last_state, _ = d_steps[-1]
    after = next(succ for state, _, _, succ in recorder.steps
                 if state.decision_id == last_state.decision_id)
    assert after.view("D").num_emitted == 1, "D's last chunk must emit its first token"
