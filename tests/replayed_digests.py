"""The format-3 digest of every state a format-4 or format-5 log's decisions
were made from, by replaying the log (which checks its own digests): the
golden tests compare these with the committed format-3 ``state_digest``
values, so a log-format change cannot hide a changed state."""

from __future__ import annotations

from pathlib import Path

from iterserve.engine.log_reader import read_log
from iterserve.engine.observer import EngineObserver
from iterserve.records.codec import state_text_digest
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.state import SchedulerState
from iterserve.sim.replay import _Replay


class _TextDigests(EngineObserver):
    def __init__(self) -> None:
        self.digests: list[str] = []

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        self.digests.append(state_text_digest(state))


def replayed_text_digests(path: Path) -> list[str]:
    """Replay the format-4, -5 or -6 log at ``path`` and list each replayed
    state's format-3 digest, in decision order."""
    log = read_log(path)
    assert log.format in (4, 5, 6)
    run = _Replay(log, None)
    observer = _TextDigests()
    run.engine.observers.append(observer)
    run.run()
    return observer.digests
