"""The decision log's incremental state digest (format 4) equals the
reference :func:`state_digest` at every decision of a run: a preempting,
chunked, overloaded workload with a non-ASCII client id (its views take the
stdlib encoder)."""

from __future__ import annotations

import dataclasses
import io

from iterserve.admission.overload import make_gate
from iterserve.cost import parse_cost_model
from iterserve.engine.observer import EngineObserver
from iterserve.policies.registry import policy_for
from iterserve.records.codec import dumps, multiset_hex
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.state import SchedulerState
from iterserve.records.state_digest import StateDigester
from iterserve.sim.generators import generate_workload
from iterserve.sim.report import RunConfig, run_simulation
from iterserve.sim.workload_spec import parse_spec
from oracles.state_digest_reference import state_digest, state_digest_record

SPEC = {
    "workload_id": "digest", "seed": 3, "num_requests": 120, "clock": "ms",
    "capacity": {"max_num_batched_tokens": 256, "max_num_seqs": 16},
    "kv": {"num_kv_blocks": 64, "block_size": 16},
    "arrival": {"process": "poisson", "rate_per_s": 40},
    "clients": [
        {"client_id": "c0", "prompt_tokens": {"kind": "uniform", "min": 8, "max": 300},
         "output_tokens": {"kind": "uniform", "min": 1, "max": 60}},
        {"client_id": "clïent-ü", "prompt_tokens": {"kind": "uniform", "min": 8, "max": 200},
         "output_tokens": {"kind": "uniform", "min": 1, "max": 40}},
    ],
}


@dataclasses.dataclass
class _Checker(EngineObserver):
    digester: StateDigester = dataclasses.field(default_factory=StateDigester)
    num_checked: int = 0

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        for cut in (state, successor):
            assert self.digester.canonical_text(cut) == dumps(state_digest_record(cut))
            assert self.digester.digest(cut) == state_digest(cut)
            self.num_checked += 1


def test_incremental_digest_equals_the_full_encoding_over_a_run() -> None:
    manifest = generate_workload(parse_spec(SPEC))
    model = parse_cost_model("linear:8,0.02,0.1")
    config = RunConfig(policy_for("vllm", manifest.online, cost_model=model), model,
                       make_gate("accept-all", {}))
    checker = _Checker()
    run = run_simulation(manifest, config, io.StringIO(), [checker])
    assert run.engine.is_done and checker.num_checked > 200
    assert run.executor.kv is not None and run.executor.kv.stats().intents.get("preempt_recompute")


def test_a_changed_view_is_encoded_again() -> None:
    manifest = generate_workload(parse_spec(SPEC))
    model = parse_cost_model("linear:8,0.02,0.1")
    config = RunConfig(policy_for("vllm", manifest.online, cost_model=model), model,
                       max_iterations=5)
    state = run_simulation(manifest, config).engine.state
    digester = StateDigester()
    assert digester.digest(state) == state_digest(state)
    rid = next(iter(state.views))
    changed = dict(state.views)
    changed[rid] = changed[rid]._replace(num_emitted=changed[rid].num_emitted + 7)
    other = dataclasses.replace(state, views=changed)
    assert digester.digest(other) == state_digest(other) != state_digest(state)


def test_views_that_arrive_anywhere_in_the_mapping_are_placed_in_order() -> None:
    manifest = generate_workload(parse_spec(SPEC))
    model = parse_cost_model("linear:8,0.02,0.1")
    config = RunConfig(policy_for("vllm", manifest.online, cost_model=model), model,
                       max_iterations=30)
    state = run_simulation(manifest, config).engine.state
    assert len(state.views) >= 4
    digester = StateDigester()
    ids = sorted(state.views)
    first = dataclasses.replace(state, views={rid: state.views[rid] for rid in ids[1:-1]})
    assert digester.digest(first) == state_digest(first)
    # the new ids come first and last in the mapping, one known id retires
    shuffled = {ids[0]: state.views[ids[0]], **{rid: state.views[rid] for rid in ids[2:]}}
    later = dataclasses.replace(state, views=shuffled)
    assert digester.digest(later) == state_digest(later)
    assert digester.digest(state) == state_digest(state)


def test_encode_views_writes_each_view_as_the_canonical_encoder_does() -> None:
    from iterserve.records.canonical_json import canonical_json
    from iterserve.records.codec import view_to_json
    from iterserve.records.state_digest import encode_views
    from iterserve.records.view import FinishReason, Lifecycle, RequestView

    reasons = [None, *FinishReason]
    views = [RequestView(f"r{i}", i % 3, i, "c0", 1, 12.5 + i / 7, i, 100, 40, i % 5, 99, 99,
                         lifecycle, i % 2 == 0, 0, None if i % 2 else 3.25, 1e-05 * i,
                         reasons[i % len(reasons)])
             for i, lifecycle in enumerate(Lifecycle)]
    expected = [canonical_json(view_to_json(view))[1:-1].encode() for view in views]
    assert encode_views(views) == expected
    odd = [views[0]._replace(client_id="a],[b"), views[1]._replace(client_id="clïent")]
    assert encode_views(odd) == [canonical_json(view_to_json(v))[1:-1].encode() for v in odd]


def test_the_waiting_pairs_follow_any_change_of_the_queue() -> None:
    """Admissions from the front and the middle, arrivals, preempted ids at
    the front, reorders, an empty queue and an id listed twice (an invalid
    queue: the sum still follows its pairs): the incremental pair sum is
    the reference's after every change."""
    import random

    from iterserve.records.state_digest import common_runs
    from oracles.state_digest_reference import waiting_to_json

    rng = random.Random(4)
    digester = StateDigester()
    queue: list[str] = []
    next_id = 0
    for _ in range(400):
        change = rng.random()
        if change < 0.3:
            queue += [f"r{next_id + k}" for k in range(rng.randint(1, 3))]
            next_id += 3
        elif change < 0.5 and queue:
            del queue[:rng.randint(1, 3)]
        elif change < 0.65 and queue:
            del queue[rng.randrange(len(queue))]
        elif change < 0.75:
            queue.insert(0, f"p{next_id}")
            next_id += 1
        elif change < 0.8 and len(queue) > 2:
            i, j = rng.sample(range(len(queue)), 2)
            queue[i], queue[j] = queue[j], queue[i]
        elif change < 0.83:
            queue.clear()
        elif change < 0.85 and queue:
            queue.append(queue[0])
        waiting = tuple(queue)
        digester._follow_waiting(waiting)
        assert {"num_ids": len(waiting), "pairs": multiset_hex(digester._pairs)} == \
            waiting_to_json(waiting)
        for i, j, size in common_runs(waiting, tuple(queue[1:])):
            assert waiting[i:i + size] == tuple(queue[1:])[j:j + size]
