"""Fidelity (issue 15 step 5): the same Poisson workload on the real engine
(tiny preset, CPU, one thread) and in the simulator timed by a profile
fitted in this session, under two policies. Mean TTFT and mean TBT agree
within 15 %, output throughput within 10 %.

Wall-clock figures on a shared machine are noisy: the profile is measured
right before the real runs, and each real run is bracketed so that all of
them see the same machine. The figures are printed (``-s``) for the README.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from iterserve.cost import ProfiledIterationCost
from iterserve.engine.torch_executor import TorchExecutor
from iterserve.lab.profiling import QUICK_GRID, profile_model
from iterserve.lab.runs import (
    PoissonShape,
    poisson_workload,
    relative_gaps,
    run_real,
    run_simulated,
)
from iterserve.model.params import SamplingParams
from iterserve.records.spec import Capacity, KvSpec

pytestmark = pytest.mark.slow

POLICIES: dict[str, dict[str, int]] = {"vllm": {}, "sarathi": {"chunk_size": 64}}
BOUNDS = {"mean_ttft": 0.15, "mean_tbt": 0.15, "output_throughput": 0.10}
NUM_BLOCKS = 1024
BLOCK_SIZE = 16


def _real(tiny_model, workload, policy: str, settings: dict[str, int]):  # type: ignore[no-untyped-def]
    executor = TorchExecutor(tiny_model, NUM_BLOCKS, BLOCK_SIZE)
    for index, spec in enumerate(workload.requests):
        params = SamplingParams(max_tokens=spec.max_output_tokens, temperature=0.0,
                                ignore_eos=True)
        executor.add_request(spec.request_id, spec.prompt_token_ids, params, seed=index)
    return run_real(workload, policy, executor, dict(settings))


def test_simulator_with_a_fitted_profile_matches_the_real_engine(
        tiny_dir: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    shape = PoissonShape(num_requests=200, rate_per_s=40.0, prompt_lens=(16, 96),
                         output_lens=(8, 24), vocab_size=tiny_model.config.vocab_size, seed=7)
    workload = poisson_workload(shape, Capacity(token_budget=256, sequence_budget=32),
                                KvSpec(NUM_BLOCKS, BLOCK_SIZE))
    fitted = profile_model(tiny_dir, tiny_model, QUICK_GRID)
    model = ProfiledIterationCost("session", fitted.profile)
    print(f"\nprofile: {fitted.num_samples} iterations in {fitted.elapsed_s:.1f} s, "
          f"held-out error mean {fitted.profile.fit.mean_relative_error:.1%} "
          f"max {fitted.profile.fit.max_relative_error:.1%}")
    failures = []
    for policy, settings in POLICIES.items():
        real = _real(tiny_model, workload, policy, settings)
        simulated = run_simulated(workload, policy, model, dict(settings))
        gaps = relative_gaps(real, simulated)
        print(f"{policy}: real {real.to_dict()}\n{policy}: sim  {simulated.to_dict()}\n"
              f"{policy}: gaps {', '.join(f'{k} {v:.1%}' for k, v in gaps.items())}")
        failures += [f"{policy} {name} off by {gap:.1%}" for name, gap in gaps.items()
                     if gap > BOUNDS[name]]
    assert not failures, "; ".join(failures)
