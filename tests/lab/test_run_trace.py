"""RunTrace's request records: copied where a fact changes beyond a count
(first token, end, intent), the emitted counts settled from the last views
when read. They must equal a copy of every completed request's facts at
every cut, read mid-run or at the end, pickled or not."""

from __future__ import annotations

import pickle

import pytest
from lab_helpers import chat_mix_manifest

from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.engine.trace import RequestRecord, RunTrace
from iterserve.policies.registry import policy_for
from iterserve.records.view import TERMINAL_LIFECYCLES
from iterserve.sim.factory import make_simulated_executor


class _EveryCut(EngineObserver):
    """The reference: every completed or intended request's facts copied at
    every cut; at every cut it compares the trace's records (read mid-run,
    so settled many times over) with its own."""

    def __init__(self, trace: RunTrace) -> None:
        self.trace, self.num_compared = trace, 0
        self.records: dict[str, RequestRecord] = {}

    def on_arrival(self, spec, now) -> None:  # type: ignore[no-untyped-def]
        self.records[spec.request_id] = RequestRecord(spec.request_id, spec.client_id,
                                                      spec.arrival, spec.num_prompt_tokens)

    def on_step(self, state, plan, result, successor) -> None:  # type: ignore[no-untyped-def]
        ids = [item.request_id for item in result.completed]
        ids += [intent.request_id for intent in plan.intents]
        for rid in ids:
            after, record = successor.views.get(rid), self.records.get(rid)
            if after is None or record is None:
                continue
            record.first_token_time = after.first_token_time
            record.num_emitted = after.num_emitted
            if after.lifecycle in TERMINAL_LIFECYCLES:
                record.finish_time = successor.now
                record.finish_reason = None if after.finish_reason is None else (
                    after.finish_reason.value)
        assert self.trace.requests == self.records  # the trace saw this cut first
        self.num_compared += 1


@pytest.mark.parametrize("num_blocks", [4000, 60])  # 60: preemptions and resumes
@pytest.mark.parametrize("max_iterations", [None, 150])
def test_the_records_equal_a_copy_at_every_cut(num_blocks, max_iterations) -> None:
    manifest = chat_mix_manifest(num_blocks, 60)
    trace = RunTrace()
    reference = _EveryCut(trace)
    engine = Engine(manifest.online, policy_for("vllm", manifest.online),
                    make_simulated_executor(manifest), [trace, reference])
    engine.run(max_iterations)
    assert reference.num_compared >= engine.num_iterations
    assert trace.requests == reference.records
    assert trace.num_finished == sum(r.finish_time is not None for r in reference.records.values())
    if max_iterations is not None:  # stopped early: live requests keep their counts
        assert any(r.finish_time is None and r.num_emitted for r in trace.requests.values())
    copy = pickle.loads(pickle.dumps(trace))
    assert copy == trace and copy.requests == reference.records
    assert copy.iterations == trace.iterations
