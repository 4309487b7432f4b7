"""Profile cells measured between the iterations of a real run (the fidelity
protocol).

A profile fitted minutes before a run prices that run at the machine's
speed of those minutes; on a shared machine the speed moves by 10-30 %
between one minute and the next, and a simulation priced at the wrong speed
misses every latency by as much. So the grid's cells run *during* the real
run: after each ``every_s`` CPU seconds of the run, one cell runs (the next
one of the grid, round robin) on an executor of its own. The run's executor
times its iterations with an :class:`ExcludingClock`, which does not count
the cells' time: the run's own timeline is the one it would have had
without them (its clock is the process's CPU time, so it cannot tell a
pause). The cells measured during a run then give the machine's speed over
that run (:func:`iterserve.cost.fit.speed_factor`) while no number from the
run itself enters the profile.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from iterserve.cost.fit import MeasuredIteration
from iterserve.engine.observer import EngineObserver
from iterserve.lab.profiling import ProfileGrid, grid_cells, measure_cell
from iterserve.model.executor import TorchExecutor
from iterserve.model.llama import PackedCausalLM
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.state import SchedulerState

RunResult = TypeVar("RunResult")
#: A real run: called with the clock its executor must time iterations by and
#: the observers its engine must carry.
Run = Callable[[Callable[[], float], Sequence[EngineObserver]], RunResult]


class ExcludingClock:
    """``base()`` less the time spent inside :meth:`excluding` calls."""

    def __init__(self, base: Callable[[], float] = time.process_time) -> None:
        self._base = base
        self.excluded_s = 0.0

    def __call__(self) -> float:
        return self._base() - self.excluded_s

    def excluding(self, work: Callable[[], RunResult]) -> RunResult:
        """Run ``work``; its time does not show on this clock."""
        began = self._base()
        try:
            return work()
        finally:
            self.excluded_s += self._base() - began


class CellInterleaver(EngineObserver):
    """Runs the grid's next cell after every ``every_s`` seconds of the
    clock, outside the clock; collects the cells' measured iterations."""

    def __init__(self, model: PackedCausalLM, grid: ProfileGrid, clock: ExcludingClock,
                 every_s: float, seed: int = 0) -> None:
        if every_s <= 0:
            raise ValueError(f"every_s must be > 0, got {every_s!r}")
        self._grid, self._clock, self._every_s = grid, clock, every_s
        self._cells = grid_cells(grid)
        self._rng = random.Random(grid.seed * 1_000_003 + seed)
        self._executor = TorchExecutor(model, grid.num_blocks, grid.block_size,
                                       timer=time.process_time)
        self._next = 0
        self.samples: list[MeasuredIteration] = []
        clock.excluding(lambda: measure_cell(self._executor, grid, *self._cells[0], self._rng,
                                             "warmup"))  # discarded, like measure()'s
        self._last_s = clock()

    @property
    def num_cells_run(self) -> int:
        return self._next

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        if self._clock() - self._last_s >= self._every_s:
            self._clock.excluding(self.run_next_cell)
            self._last_s = self._clock()

    def run_next_cell(self) -> None:
        index = self._next % len(self._cells)
        gap_ms = self._grid.arrival_gap_ms if index % 2 else 0.0
        self.samples.extend(measure_cell(self._executor, self._grid, *self._cells[index],
                                         self._rng, f"i{self._next}", gap_ms))
        self._next += 1

    def complete_the_grid(self) -> None:
        """Run the cells not measured yet (after the run: a short run must
        still cover every shape of the grid)."""
        while self._next < len(self._cells):
            self.run_next_cell()


def measure_during(model: PackedCausalLM, grid: ProfileGrid, runs: Mapping[str, Run[RunResult]],
                   every_s: float, timer: Callable[[], float] = time.process_time,
                   ) -> tuple[dict[str, list[MeasuredIteration]], dict[str, RunResult]]:
    """Each run with the grid's cells interleaved (see the module docstring):
    the cells measured during (and, to complete the grid, right after) each
    run, and each run's result."""
    samples: dict[str, list[MeasuredIteration]] = {}
    results: dict[str, RunResult] = {}
    for index, (name, run) in enumerate(runs.items()):
        clock = ExcludingClock(timer)
        interleaver = CellInterleaver(model, grid, clock, every_s, seed=index)
        results[name] = run(clock, [interleaver])
        interleaver.complete_the_grid()
        samples[name] = interleaver.samples
    return samples, results
