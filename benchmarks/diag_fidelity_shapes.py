"""Per-shape bias of a fitted profile on the fidelity workload (issue 15 B).

Runs what ``tests/engine_model/test_fidelity.py`` runs (tiny preset, CPU
time, the grid's cells run between the real runs' iterations) but also records every
real iteration's batch shape and measured CPU time, then prints, for the
decode-only iterations of the real runs grouped by decode batch size (and
for prefill-carrying ones as one group), the ratio of the profile's
prediction (scaled by the cells' speed factor, as the test does) to the
measured time: the mean of predicted / measured and the ratio of totals.
A ratio above 1 means the simulator would price those iterations too high.

Then it separates the model from the machine: for each real run it prints
the simulation's gaps (mean TTFT, mean TBT) twice, once with the speed factor
the test uses (the cells measured during the run) and once with the real
run's own factor (its measured total over the profile's prediction for its
shapes: a diagnosis the test may not use, since it reads the run it is
compared with). Small gaps with the run's own factor and large ones with
the cells' factor mean the profile prices the shapes right and the cells
did not catch the host's speed during the run.

No number of a real run enters the fit: the real samples are only compared.

    .venv/bin/python benchmarks/diag_fidelity_shapes.py
    .venv/bin/python benchmarks/diag_fidelity_shapes.py --grid quick --repeat 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from iterserve.cost import BatchShape, CostProfile, ProfiledIterationCost
from iterserve.cost.fit import MeasuredIteration, fit_profile, speed_factor
from iterserve.engine.events import EventRecorder
from iterserve.engine.loop import Engine
from iterserve.lab.interleaved import measure_during
from iterserve.lab.profiling import FIDELITY_GRID, GRIDS, _IterationTimes, provenance
from iterserve.lab.runs import (
    FIDELITY_KV,
    FIDELITY_POLICIES,
    RunFigures,
    fidelity_workload,
    figures_of,
    relative_gaps,
    run_simulated,
)
from iterserve.model.executor import TorchExecutor
from iterserve.model.loader import load_model
from iterserve.model.make_model import make_model
from iterserve.model.runtime import set_num_threads
from iterserve.policies.registry import policy_for
from iterserve.records.sampling_params import SamplingParams

POLICIES = FIDELITY_POLICIES
NUM_BLOCKS, BLOCK_SIZE = FIDELITY_KV.num_kv_blocks, FIDELITY_KV.block_size
TIMER = time.process_time
CELL_EVERY_S = 0.12  # as the test
GRIDS = {**GRIDS, "fidelity": FIDELITY_GRID}

Samples = list[MeasuredIteration]


def real_samples(model, workload, policy: str,  # type: ignore[no-untyped-def]
                 settings: dict[str, int], clock, observers) -> tuple[Samples, RunFigures]:
    executor = TorchExecutor(model, NUM_BLOCKS, BLOCK_SIZE, timer=clock)
    for index, spec in enumerate(workload.requests):
        params = SamplingParams(max_tokens=spec.max_output_tokens, temperature=0.0,
                                ignore_eos=True)
        executor.add_request(spec.request_id, spec.prompt_token_ids, params, seed=index)
    times, recorder = _IterationTimes(), EventRecorder(0.001)
    engine_policy = policy_for(policy, workload, dict(settings), strict=False)
    Engine(workload, engine_policy, executor, [times, recorder, *observers]).run()
    return times.samples, figures_of(recorder.log())


def group_of(shape: BatchShape) -> str:
    if shape.num_prefill_rows:
        return "prefill+"
    return f"decode {shape.num_decode_rows:>2}"


def bias_table(profile: CostProfile, samples: Samples, factor: float) -> list[str]:
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for shape, measured_ms, _ in samples:
        groups[group_of(shape)].append((profile.predict_ms(shape) * factor, measured_ms))
    lines = []
    for name in sorted(groups):
        pairs = groups[name]
        mean_ratio = sum(p / m for p, m in pairs) / len(pairs)
        total = sum(p for p, _ in pairs) / sum(m for _, m in pairs)
        measured = sum(m for _, m in pairs) / len(pairs)
        lines.append(f"  {name}: n={len(pairs):4d} measured {measured:6.3f} ms  "
                     f"pred/meas mean {mean_ratio:5.3f} totals {total:5.3f}")
    return lines


def one_round(model_dir: Path, model, grid_name: str) -> None:  # type: ignore[no-untyped-def]
    grid = GRIDS[grid_name]
    workload = fidelity_workload(model.config.vocab_size)
    cells, reals = measure_during(
        model, grid, {policy: partial(real_samples, model, workload, policy, settings)
                      for policy, settings in POLICIES.items()}, CELL_EVERY_S, timer=TIMER)
    profile = fit_profile([s for one in cells.values() for s in one],
                          provenance(model_dir, model.dtype))
    print(f"profile ({grid_name}): {sum(map(len, cells.values()))} iterations, held-out error mean "
          f"{profile.fit.mean_relative_error:.1%} max {profile.fit.max_relative_error:.1%}")
    print("  intercept", round(profile.intercept_ms, 4), "coefficients",
          [round(c, 5) for c in profile.coefficients_ms])
    for policy, settings in POLICIES.items():
        samples, figures = reals[policy]
        factor = speed_factor(profile, cells[policy])
        print(f"{policy}: speed factor {factor:.3f}")
        print("\n".join(bias_table(profile, samples, factor)))
        total_pred = sum(profile.predict_ms(s.shape) * factor for s in samples)
        total_meas = sum(s.duration_ms for s in samples)
        print(f"  all: pred/meas totals {total_pred / total_meas:5.3f}")
        own = speed_factor(profile, samples)
        for name, used in (("cells' factor", factor), ("run's own factor", own)):
            cost = ProfiledIterationCost("session", profile.scaled(used))
            gaps = relative_gaps(figures, run_simulated(workload, policy, cost, dict(settings)))
            print(f"  gaps with the {name} {used:.3f}: "
                  + ", ".join(f"{name} {gap:.1%}" for name, gap in gaps.items()))
    print("grid samples, their own fit:")
    print("\n".join(bias_table(profile, [s for one in cells.values() for s in one], 1.0)))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", choices=sorted(GRIDS), default="fidelity")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    set_num_threads(1)  # as tests/engine_model/conftest.py pins it
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_model(Path(tmp), preset="tiny", seed=0)
        model = load_model(model_dir)
        for _ in range(args.repeat):
            one_round(model_dir, model, args.grid)


if __name__ == "__main__":
    main()
