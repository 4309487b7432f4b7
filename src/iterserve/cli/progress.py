"""A progress bar for long ``simulate`` runs: on stderr, only when stderr is
a terminal, and only once a run has lasted ``delay_s`` (short runs and piped
or captured output stay silent). It observes the engine and changes nothing.
After the run, :meth:`RunProgress.phase` names what the command does next
(the report of a 100,000-request run takes half a minute)."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import Progress, TaskID

from iterserve.engine.observer import EngineObserver
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.state import SchedulerState

_CHECK_EVERY_STEPS = 32  # read the wall clock only this often


class RunProgress(EngineObserver):
    def __init__(self, num_requests: int, console: Console | None = None, *,
                 delay_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._console = console or Console(stderr=True)
        self._is_enabled = self._console.is_terminal
        self._num_requests = num_requests
        self._delay_s = delay_s
        self._clock = clock
        self._started_s = clock()
        self._num_steps = 0
        self._num_finished = 0
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    @property
    def is_shown(self) -> bool:
        return self._progress is not None

    @property
    def num_finished(self) -> int:
        """Requests finished so far (each cut's ``finished`` lists only the
        requests that finished in it: they are retired at the next cut)."""
        return self._num_finished

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        self._num_steps += 1
        self._num_finished += len(successor.finished)
        if not self._is_enabled or self._num_steps % _CHECK_EVERY_STEPS:
            return
        if self._progress is None:
            if self._clock() - self._started_s < self._delay_s:
                return
            self._start()
        assert self._progress is not None and self._task is not None
        self._progress.update(self._task, completed=self._num_finished,
                              description=f"simulate: {self._num_steps} iterations")

    def phase(self, description: str) -> None:
        """Show ``description`` on the bar (when it is shown), with every
        request counted: the run is over, the command goes on."""
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self._num_finished,
                                  description=f"simulate: {description}")

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _start(self) -> None:
        self._progress = Progress(console=self._console, transient=True)
        self._task = self._progress.add_task("simulate", total=self._num_requests)
        self._progress.start()
