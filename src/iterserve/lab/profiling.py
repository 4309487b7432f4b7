"""``iterserve profile``: measure the real TorchExecutor over a grid of batch
shapes and fit the iteration-time model of :mod:`iterserve.cost.profiled`.

Each grid cell is a small burst on the real engine (``num_sequences``
requests of about ``prompt_len`` tokens, greedy, outputs of varied length;
every other cell arrives at once, the others ``arrival_gap_ms`` apart so
that new prefills join running decodes): its iterations sweep prefill
chunks up to the token budget, mixed prefill + decode iterations and
decode iterations over a growing context. The cells run under ``grid.policy``: an iteration's time includes the
scheduler's, so profile with the policy you will simulate. Every executed
iteration is one sample: its
:func:`~iterserve.cost.batch_shape`, the duration the executor reports
(wall time since the previous iteration ended, scheduling included, which is
what the simulator must reproduce) and the shape of that previous iteration
(its aftermath is in this duration: :mod:`iterserve.cost.fit`); the engine carries an event recorder,
as a measured run does. The first cell runs twice and its first pass is
discarded (warm-up).
"""

from __future__ import annotations

import dataclasses
import hashlib
import platform
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from iterserve.cost import BatchShape, CostProfile, batch_shape
from iterserve.cost.fit import MeasuredIteration, fit_profile
from iterserve.engine.events import EventRecorder
from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.lab.machine import cpu_model, interpreter
from iterserve.lab.runs import FIRST_PLAIN_TOKEN
from iterserve.model.executor import TorchExecutor
from iterserve.model.llama import PackedCausalLM
from iterserve.model.runtime import dtype_name, num_threads, torch_version
from iterserve.policies.registry import policy_for
from iterserve.records.kv_abi import blocks_for
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.sampling_params import SamplingParams
from iterserve.records.spec import Capacity, OnlineWorkload, RequestSpec
from iterserve.records.state import SchedulerState


@dataclass(frozen=True, slots=True)
class ProfileGrid:
    """The batch shapes to measure: every (sequences, prompt length) pair."""

    num_sequences: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    prompt_lens: tuple[int, ...] = (16, 64, 160, 320)
    max_output_tokens: int = 10
    max_num_batched_tokens: int = 512
    block_size: int = 16
    arrival_gap_ms: float = 4.0
    policy: str = "vllm"  # the scheduler's own time is part of an iteration
    policy_settings: tuple[tuple[str, object], ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        values = (*self.num_sequences, *self.prompt_lens, self.max_output_tokens,
                  self.max_num_batched_tokens, self.block_size)
        if not self.num_sequences or not self.prompt_lens or min(values) < 1:
            raise ValueError("profile grid: every count and length must be >= 1")

    @property
    def num_blocks(self) -> int:
        """A pool that holds the largest cell without preemption."""
        rows = max(self.num_sequences) * (max(self.prompt_lens) * 3 // 2 + self.max_output_tokens)
        return blocks_for(rows, self.block_size) + max(self.num_sequences)


QUICK_GRID = ProfileGrid(num_sequences=(1, 2, 4, 16), prompt_lens=(16, 48, 128, 320),
                         max_output_tokens=6)
#: The quick grid for the fidelity workload (40 req/s): its spaced cells arrive
#: 25 ms apart, the workload's mean gap, so a lone prefill into an engine that
#: has been decoding is among the measured shapes (a 4 ms gap packs the
#: arrivals into mixed batches, and the fit then priced such a prefill 20-45 %
#: low), and outputs run to 12 tokens.
#: Its cells run under ``sarathi`` with 64-row chunks, so a prompt's later chunks
#: (a prefill that starts past 0, mixed with decode rows) are among the measured
#: shapes: profiled under ``vllm``, whose cells prefill each prompt whole, the fit
#: priced them low and the simulated ``sarathi`` mean TTFT came out 17-19 % below
#: the real one in 5 of 5 idle runs (2026-12-01); under ``sarathi`` it was 7-9 %.
FIDELITY_GRID = dataclasses.replace(QUICK_GRID, arrival_gap_ms=25.0, max_output_tokens=12,
                                    policy="sarathi", policy_settings=(("chunk_size", 64),))
GRIDS = {"full": ProfileGrid(), "quick": QUICK_GRID}


class _IterationTimes(EngineObserver):
    """Every executed iteration of one run, with the one timed before it."""

    def __init__(self) -> None:
        self.samples: list[MeasuredIteration] = []
        self._previous: BatchShape | None = None

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        if plan.work:
            shape = batch_shape(plan)
            self.samples.append(MeasuredIteration(shape, result.duration, self._previous))
            self._previous = shape


def measure_cell(executor: TorchExecutor, grid: ProfileGrid, num_sequences: int, prompt_len: int,
                 rng: random.Random, tag: str, gap_ms: float = 0.0) -> list[MeasuredIteration]:
    """One grid cell on ``executor`` (its requests arrive ``gap_ms`` apart): every
    executed iteration, in order."""
    vocab_size = executor.model.config.vocab_size
    specs = []
    for index in range(num_sequences):
        request_id = f"{tag}-{index}"
        num_prompt = rng.randint(max(1, prompt_len // 2), prompt_len * 3 // 2)
        prompt = [rng.randrange(FIRST_PLAIN_TOKEN, vocab_size) for _ in range(num_prompt)]
        num_output = rng.randint(max(1, grid.max_output_tokens // 2), grid.max_output_tokens)
        params = SamplingParams(max_tokens=num_output, temperature=0.0, ignore_eos=True)
        executor.add_request(request_id, prompt, params, seed=index)
        specs.append(RequestSpec(request_id, index * gap_ms, num_prompt, num_output,
                                 prompt_token_ids=tuple(prompt)))
    capacity = Capacity(max_num_batched_tokens=grid.max_num_batched_tokens,
                        max_num_seqs=max(num_sequences, 1))
    workload = OnlineWorkload(f"profile-{tag}", "ms", capacity, tuple(specs))
    times = _IterationTimes()
    executor.reset_clock()
    settings = {"max_num_seqs": num_sequences, **dict(grid.policy_settings)}
    policy = policy_for(grid.policy, workload, settings, strict=False)
    Engine(workload, policy, executor, [times, EventRecorder(0.001)]).run()
    for spec in specs:
        executor.streams.pop(spec.request_id)
    return times.samples


def measure(model: PackedCausalLM, grid: ProfileGrid, pass_index: int = 0,
            timer: Callable[[], float] = time.perf_counter) -> list[MeasuredIteration]:
    """Every executed iteration of every grid cell, in measured order.
    ``pass_index`` varies the prompts when a grid is measured repeatedly;
    ``timer`` is the executor's (wall clock by default)."""
    executor = TorchExecutor(model, grid.num_blocks, grid.block_size, timer=timer)
    rng = random.Random(grid.seed * 1_000_003 + pass_index)
    cells = grid_cells(grid)
    measure_cell(executor, grid, *cells[0], rng, "warmup")
    samples: list[MeasuredIteration] = []
    for index, (num_sequences, prompt_len) in enumerate(cells):
        gap_ms = grid.arrival_gap_ms if index % 2 else 0.0
        samples.extend(measure_cell(executor, grid, num_sequences, prompt_len, rng, f"c{index}",
                                    gap_ms))
    return samples


def grid_cells(grid: ProfileGrid) -> list[tuple[int, int]]:
    """The grid's (sequences, prompt length) cells in measuring order; every
    other one (odd index) has its arrivals ``grid.arrival_gap_ms`` apart."""
    return [(n, p) for n in grid.num_sequences for p in grid.prompt_lens]


def config_hash(model_dir: Path) -> str:
    """The model's identity: sha256 of its config.json."""
    return hashlib.sha256((model_dir / "config.json").read_bytes()).hexdigest()


def provenance(model_dir: Path, dtype: object) -> tuple[tuple[str, str], ...]:
    """The 0x0E coordinates of a measurement (PROVENANCE_FIELDS order, then
    the interpreter)."""
    return (
        ("config_hash", config_hash(model_dir)),
        ("dtype", dtype_name(dtype)),
        ("num_threads", str(num_threads())),
        ("torch_version", torch_version()),
        ("cpu_model", cpu_model()),
        ("machine", f"{platform.node()} {platform.system()} {platform.machine()}"),
        ("python", interpreter()),
    )


@dataclass(frozen=True, slots=True)
class ProfileRun:
    profile: CostProfile
    num_samples: int
    elapsed_s: float


def profile_model(model_dir: Path, model: PackedCausalLM, grid: ProfileGrid) -> ProfileRun:
    """Measure ``model`` (loaded from ``model_dir``) over ``grid`` and fit."""
    began = time.perf_counter()
    samples = measure(model, grid)
    fitted = fit_profile(samples, provenance(model_dir, model.dtype))
    return ProfileRun(fitted, len(samples), time.perf_counter() - began)
