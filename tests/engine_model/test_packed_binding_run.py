"""0x04 on the torch executor's path: every forward's packed rows carry the
binding of the plan that scheduled them (request key, phase, versions),
checked against the decision log's plan of the same decision."""

from __future__ import annotations

import io
import json

import pytest
from engine_model_helpers import GREEDY, make_prompts

from iterserve.llm import LLM
from log_rows import as_rows


@pytest.mark.slow
def test_each_forward_binds_its_rows_to_the_logged_plan(tiny_dir, tiny_model) -> None:
    llm = LLM(tiny_dir, block_size=4, max_num_batched_tokens=8, enable_prefix_caching=False)
    model = llm.executor.model
    bindings = []
    forward = model.forward

    def recording(batch, cache):  # type: ignore[no-untyped-def]
        bindings.append(batch.binding)
        return forward(batch, cache)

    model.forward = recording  # type: ignore[method-assign]
    log = io.StringIO()
    llm.generate(make_prompts([6, 11], tiny_model.config.vocab_size, seed=2), GREEDY,
                 decision_log=log)
    plans = {doc["decision_id"]: doc["plan"] for line in log.getvalue().splitlines()
             if (doc := as_rows(json.loads(line)))["type"] == "iteration"}
    assert bindings and None not in bindings
    for binding in bindings:
        plan = plans[binding.decision_id]
        assert binding.input_state_version == plan["input_state_version"]
        items = {(w["request_id"], w["generation"]): w for w in plan["work"]}
        keys = binding.request_key_by_row
        assert len(keys) == binding.request_offsets[-1]
        for key, phase in zip(keys, binding.phase_by_row, strict=True):
            assert key in items and items[key]["kind"] == phase.value
        for rid, version in zip(binding.request_ids, binding.snapshot_versions, strict=True):
            assert items[(rid, 0)]["snapshot_version"] == version
