"""A decision costs what it changes, not how many requests wait (0x01A at
scale): the same decisions (four running requests, each step admitting
and retiring a few) over 50,000 waiting requests take about the time they
take over 1,000, measured in one run, interleaved, the fastest of several
rounds kept. Before the state shared its views and its waiting queue with
its predecessor, every transition copied both (and the digest and the
state check compared the whole queue): about 5x slower at 50,000."""

from __future__ import annotations

import gc
import time

from iterserve.cost import parse_cost_model
from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.policies.registry import policy_for
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.state import SchedulerState
from iterserve.records.state_digest import StateDigester
from iterserve.sim.generators import generate_workload
from iterserve.sim.report import costed_executor
from iterserve.sim.workload_spec import parse_spec

_WARM_UP_STEPS = 40
_MEASURED_STEPS = 200


class _Digests(EngineObserver):
    """The decision log's per-decision work: one incremental digest."""

    def __init__(self) -> None:
        self._digester = StateDigester()

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        self._digester.digest(state)


def _engine(num_waiting: int, policy: str) -> Engine:
    manifest = generate_workload(parse_spec({
        "workload_id": f"waiting-{num_waiting}", "seed": 3, "num_requests": num_waiting,
        "clock": "ms", "capacity": {"max_num_batched_tokens": 64, "max_num_seqs": 4},
        "kv": {"num_kv_blocks": 64, "block_size": 16},
        "arrival": {"process": "explicit", "timestamps_s": [0.0] * num_waiting},
        "clients": [{"client_id": "c0", "prompt_tokens": {"kind": "uniform", "min": 8, "max": 24},
                     "output_tokens": {"kind": "uniform", "min": 2, "max": 6}}],
    }))
    model = parse_cost_model("linear:5,0.05,0.5")
    engine = Engine(manifest.online, policy_for(policy, manifest.online, cost_model=model),
                    costed_executor(manifest, model), [_Digests()], validate=True)
    for _ in range(_WARM_UP_STEPS):
        engine.step()
    return engine


def _seconds_per_step(engine: Engine) -> float:
    gc.collect()
    started = time.process_time()
    for _ in range(_MEASURED_STEPS):
        engine.step()
    return (time.process_time() - started) / _MEASURED_STEPS


def test_decision_time_does_not_grow_with_the_waiting_queue() -> None:
    small, large = _engine(1_000, "vllm"), _engine(50_000, "vllm")
    assert len(large.state.waiting) > 49_000 and len(large.state.running) == 4
    times: dict[str, list[float]] = {"small": [], "large": []}
    for _ in range(3):
        times["small"].append(_seconds_per_step(small))
        times["large"].append(_seconds_per_step(large))
    ratio = min(times["large"]) / min(times["small"])
    assert ratio < 1.8, f"a decision over 50,000 waiting took {ratio:.1f}x one over 1,000"
