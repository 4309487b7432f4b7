"""Fidelity (issue 15 step 5): the same Poisson workload on the real engine
(tiny preset, CPU, one thread) and in the simulator timed by a profile
fitted in this session, under two policies. Mean TTFT and mean TBT agree
within 15 %, output throughput within 10 %.

Wall-clock figures on a shared machine are noisy: other processes take the
CPU for tens of ms at a time. So the profile and the real runs both time
iterations with the process's CPU clock (``time.process_time``: the
executor's own work, scheduling included, without other processes' share).
CPU time still moves by 10-30 % from one minute to the next here (shared
caches and cores), and a profile measured before a run priced it at the
speed of those minutes: with the real run's own speed (a diagnosis,
benchmarks/diag_fidelity_shapes.py) the simulated mean TBT was within 0.2-3.6 %
of the real one where the passes around the run missed by up to 28 %. So the
grid's cells run *during* each real run, between its iterations and outside
its clock (:mod:`iterserve.lab.interleaved`); the profile is fitted on all
the cells, and the simulation of run i uses that fit scaled to the cells
measured during run i (:func:`iterserve.cost.fit.speed_factor`). No number
from a real run enters its simulation. The grid is the quick one with its
spaced cells 25 ms apart, the workload's mean gap
(:data:`iterserve.lab.profiling.FIDELITY_GRID`). Everything else is the
production path. The profile runs under ``sarathi`` (64-row chunks) for
both policies, so a prompt's later chunks are among its shapes (under
``vllm`` the simulated ``sarathi`` TTFT was 17-19 % low); profiling each
policy under itself (an iteration's time includes the scheduler's) was
tried and was less stable (docs/performance-history.md). The figures are
printed (``-s``) for docs/benchmarks.md.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import pytest

from iterserve.cost import ProfiledIterationCost
from iterserve.cost.fit import fit_profile, speed_factor
from iterserve.lab.interleaved import measure_during
from iterserve.lab.profiling import FIDELITY_GRID, provenance
from iterserve.lab.runs import (
    FIDELITY_KV,
    FIDELITY_POLICIES,
    fidelity_workload,
    relative_gaps,
    run_real,
    run_simulated,
)
from iterserve.model.executor import TorchExecutor
from iterserve.records.sampling_params import SamplingParams

# timing fidelity needs a quiet machine: on a shared 2-core box it passed in 3 of 17 tries,
# so it is excluded from the default run (`pytest -m fidelity` runs it)
pytestmark = [pytest.mark.slow, pytest.mark.fidelity]

POLICIES = FIDELITY_POLICIES
BOUNDS = {"mean_ttft": 0.15, "mean_tbt": 0.15, "output_throughput": 0.10}
NUM_BLOCKS, BLOCK_SIZE = FIDELITY_KV.num_kv_blocks, FIDELITY_KV.block_size
TIMER = time.process_time  # see the module docstring
CELL_EVERY_S = 0.12  # run CPU seconds between two profile cells: about two grid passes a run


def _real(tiny_model, workload, policy: str, settings: dict[str, int],  # type: ignore[no-untyped-def]
          clock, observers):
    executor = TorchExecutor(tiny_model, NUM_BLOCKS, BLOCK_SIZE, timer=clock)
    for index, spec in enumerate(workload.requests):
        params = SamplingParams(max_tokens=spec.max_output_tokens, temperature=0.0,
                                ignore_eos=True)
        executor.add_request(spec.request_id, spec.prompt_token_ids, params, seed=index)
    return run_real(workload, policy, executor, dict(settings), observers)


def test_simulator_with_a_fitted_profile_matches_the_real_engine(
        tiny_dir: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    workload = fidelity_workload(tiny_model.config.vocab_size)
    cells, reals = measure_during(
        tiny_model, FIDELITY_GRID,
        {policy: partial(_real, tiny_model, workload, policy, settings)
         for policy, settings in POLICIES.items()}, CELL_EVERY_S, timer=TIMER)
    profile = fit_profile([s for one in cells.values() for s in one],
                          provenance(tiny_dir, tiny_model.dtype))
    print(f"\nprofile: {sum(map(len, cells.values()))} iterations, held-out error mean "
          f"{profile.fit.mean_relative_error:.1%} max {profile.fit.max_relative_error:.1%}")
    failures = []
    for policy, settings in POLICIES.items():
        real = reals[policy]
        factor = speed_factor(profile, cells[policy])
        model = ProfiledIterationCost("session", profile.scaled(factor))
        simulated = run_simulated(workload, policy, model, dict(settings))
        gaps = relative_gaps(real, simulated)
        print(f"{policy}: speed factor {factor:.3f}")
        print(f"{policy}: real {real.to_dict()}\n{policy}: sim  {simulated.to_dict()}\n"
              f"{policy}: gaps {', '.join(f'{k} {v:.1%}' for k, v in gaps.items())}")
        failures += [f"{policy} {name} off by {gap:.1%}" for name, gap in gaps.items()
                     if gap > BOUNDS[name]]
    assert not failures, "; ".join(failures)
