"""One workload on the real engine or in the simulator, and the figures the
fidelity comparison reads (mean TTFT, mean TBT, output throughput).

Both sides run the same scheduler on the same online workload; only the
executor differs: the real ``TorchExecutor`` (iteration durations measured
on the wall clock) or the ``SimulatedExecutor`` timed by a cost model.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from iterserve.cost import IterationCostModel, seconds_per_clock_unit
from iterserve.engine.events import EventRecorder
from iterserve.engine.executor import Executor
from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.metrics.clocks import request_clocks
from iterserve.metrics.event_scan import build_timelines
from iterserve.metrics.events import EventLog
from iterserve.policies.deadline import bind_cost_model
from iterserve.policies.registry import policy_for
from iterserve.records.spec import (
    Capacity,
    HiddenTruth,
    KvSpec,
    OnlineWorkload,
    RequestSpec,
    WorkloadManifest,
)
from iterserve.records.time_units import s_to_ms
from iterserve.sim.arrivals import poisson_gap_s
from iterserve.sim.report import RunConfig, run_simulation

FIRST_PLAIN_TOKEN = 4  # ids below are special tokens of the built tokenizers


@dataclass(frozen=True, slots=True)
class PoissonShape:
    """A Poisson workload of ``num_requests`` with uniform prompt and output
    lengths, on the ``ms`` clock, every prompt a list of random plain tokens."""

    num_requests: int
    rate_per_s: float
    prompt_lens: tuple[int, int]
    output_lens: tuple[int, int]
    vocab_size: int
    seed: int = 0


def poisson_workload(shape: PoissonShape, capacity: Capacity, kv: KvSpec) -> OnlineWorkload:
    rng = random.Random(shape.seed)
    arrival_ms = 0.0
    specs = []
    for index in range(shape.num_requests):
        arrival_ms += s_to_ms(poisson_gap_s(rng, shape.rate_per_s))
        num_prompt = rng.randint(*shape.prompt_lens)
        prompt = tuple(rng.randrange(FIRST_PLAIN_TOKEN, shape.vocab_size)
                       for _ in range(num_prompt))
        specs.append(RequestSpec(f"r{index}", round(arrival_ms, 3), num_prompt,
                                 rng.randint(*shape.output_lens), prompt_token_ids=prompt))
    return OnlineWorkload(f"poisson-{shape.seed}", "ms", capacity, tuple(specs), kv=kv)


#: The fidelity experiment (simulator against the real engine): its policies and its KV pool,
#: shared by tests/engine_model/test_fidelity.py and benchmarks/diag_fidelity_shapes.py.
FIDELITY_POLICIES: dict[str, dict[str, int]] = {"vllm": {}, "sarathi": {"chunk_size": 64}}
FIDELITY_KV = KvSpec(num_kv_blocks=1024, block_size=16)


def fidelity_workload(vocab_size: int) -> OnlineWorkload:
    """200 Poisson requests at 40 req/s, prompts 16..96, outputs 8..24, token
    budget 256, on :data:`FIDELITY_KV` (seed 7)."""
    shape = PoissonShape(num_requests=200, rate_per_s=40.0, prompt_lens=(16, 96),
                         output_lens=(8, 24), vocab_size=vocab_size, seed=7)
    capacity = Capacity(max_num_batched_tokens=256, max_num_seqs=32)
    return poisson_workload(shape, capacity, FIDELITY_KV)


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What the fidelity comparison reads from one run."""

    mean_ttft_s: float
    mean_tbt_s: float
    output_tokens_per_s: float
    num_requests: int

    def to_dict(self) -> dict[str, Any]:
        return {"mean_ttft_ms": s_to_ms(self.mean_ttft_s), "mean_tbt_ms": s_to_ms(self.mean_tbt_s),
                "output_tokens_per_s": self.output_tokens_per_s,
                "num_requests": self.num_requests}


def figures_of(log: EventLog) -> RunFigures:
    timelines = build_timelines(log)
    clocks = [request_clocks(timeline) for timeline in timelines.values()]
    ttfts = [clock.ttft_s for clock in clocks if clock.ttft_s is not None]
    gaps = [gap for clock in clocks for gap in clock.tbt_gaps_s]
    num_tokens = sum(clock.num_output_tokens for clock in clocks)
    start_s = min(timeline.arrival_s for timeline in timelines.values())
    end_s = max(event.time_s for event in log)
    return RunFigures(statistics.fmean(ttfts), statistics.fmean(gaps),
                      num_tokens / (end_s - start_s), len(clocks))


def run_real(workload: OnlineWorkload, policy_name: str, executor: Executor,
             settings: dict[str, Any] | None = None,
             observers: Sequence[EngineObserver] = ()) -> RunFigures:
    """``workload`` on a real executor whose requests are already added; the
    engine also carries ``observers``."""
    recorder = EventRecorder(seconds_per_clock_unit(workload.clock, None))
    policy = policy_for(policy_name, workload, settings or {}, strict=False)
    Engine(workload, policy, executor, [recorder, *observers]).run()
    return figures_of(recorder.log())


def run_simulated(workload: OnlineWorkload, policy_name: str, cost_model: IterationCostModel,
                  settings: dict[str, Any] | None = None) -> RunFigures:
    """``workload`` in the simulator timed by ``cost_model`` (every request
    runs to its max_output_tokens, as the real run's ignore_eos does)."""
    policy = bind_cost_model(policy_for(policy_name, workload, settings or {}, strict=False),
                             cost_model)
    manifest = WorkloadManifest(workload, HiddenTruth({}))
    run = run_simulation(manifest, RunConfig(policy, cost_model))
    return figures_of(run.recorder.log())


def relative_gaps(real: RunFigures, simulated: RunFigures) -> dict[str, float]:
    """|simulated - real| / real for each compared figure."""
    pairs: Sequence[tuple[str, float, float]] = (
        ("mean_ttft", real.mean_ttft_s, simulated.mean_ttft_s),
        ("mean_tbt", real.mean_tbt_s, simulated.mean_tbt_s),
        ("output_throughput", real.output_tokens_per_s, simulated.output_tokens_per_s),
    )
    return {name: abs(sim - want) / want for name, want, sim in pairs}
