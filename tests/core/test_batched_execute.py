"""The simulated executor's whole-plan path equals its row-by-row path.

``SimulatedExecutor._run_anonymous`` backs a plan in one
:meth:`KvResidency.back_and_commit_rows` call and completes it in one
:meth:`ResultBuilder.complete_rows` call; ``_run_each`` is the row-by-row
reference (faults, failed intents, prompt token ids). On random runs, and
on random intervals over a small pool where allocation fails, both must
publish the same facts.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iterserve.engine.kv_residency import KvResidency
from iterserve.engine.loop import Engine, EngineStalled
from iterserve.kv.config import BlockManagerConfig
from iterserve.plan.feasibility import InfeasibleRun
from iterserve.policies.registry import policy_for, policy_names
from iterserve.records.plan import WorkItem
from iterserve.records.spec import WorkloadManifest
from iterserve.records.view import WorkKind
from iterserve.sim.executor import SimulatedExecutor
from iterserve.sim.factory import make_simulated_executor

from .helpers import Recorder
from .test_properties import workloads

SETTINGS = settings(max_examples=60, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _run(online, hidden, name: str, per_row: bool) -> list:  # noqa: ANN001
    with pytest.MonkeyPatch.context() as patch:
        if per_row:
            patch.setattr(SimulatedExecutor, "_run_anonymous",
                          lambda self, plan, state, builder, kv: self._run_each(plan, state,
                                                                                builder))
        recorder = Recorder()
        try:
            engine = Engine(online, policy_for(name, online),
                            make_simulated_executor(WorkloadManifest(online, hidden)), [recorder])
            for _ in range(60):
                if engine.is_done:
                    break
                engine.step()
        except (InfeasibleRun, EngineStalled) as error:
            return [type(error).__name__, recorder.results]
        return [recorder.results, engine.state]


@SETTINGS
@given(case=workloads(), name=st.sampled_from(policy_names()))
def test_whole_plan_execution_equals_the_row_by_row_path(case, name):
    online, hidden = case
    assert _run(online, hidden, name, False) == _run(online, hidden, name, True)


@SETTINGS
@given(num_blocks=st.integers(1, 6), block_size=st.sampled_from([1, 2, 4]),
       steps=st.lists(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 1),
                                          st.integers(1, 5)), max_size=5), max_size=6))
def test_back_and_commit_rows_equals_back_and_commit_per_interval(num_blocks, block_size, steps):
    """Twin pools take the same intervals (ids r0..r4, a generation that may
    change, growth of 1..5 rows): the batch and the per-interval call agree
    on every answer, every failure count and every block table."""
    config = BlockManagerConfig(num_blocks, block_size, enable_prefix_caching=False)
    batch, single = KvResidency(config), KvResidency(config)
    ends: dict[tuple[str, int], int] = {}
    for step in steps:
        work = []
        for index, generation, rows in dict.fromkeys(step):
            rid = f"r{index}"
            if any(item.request_id == rid for item in work):
                continue
            start = ends.get((rid, generation), 0)
            work.append(WorkItem(rid, generation, 0, start, start + rows, WorkKind.PREFILL_CHUNK,
                                 range(start, start + rows)))
        expected = [single.back_and_commit(w.request_id, w.generation, w.start, w.end, None)
                    for w in work]
        assert batch.back_and_commit_rows(work) == expected
        for w, ok in zip(work, expected, strict=True):
            if ok:
                ends[(w.request_id, w.generation)] = w.end
        assert batch.stats() == single.stats()
        assert batch.facts() == single.facts()
        for rid in (f"r{i}" for i in range(5)):
            held = batch.key(rid)
            assert held == single.key(rid)
            if held is not None:
                assert batch.block_table(rid) == single.block_table(rid)
