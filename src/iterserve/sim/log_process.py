"""A simulated run's decision log written by a second process (issue 15).

A simulated run is deterministic: the same manifest, policy, gate and cost
model take the same decisions in any process. On a machine with a spare CPU
:func:`~iterserve.sim.report.run_simulation` forks before the run starts. The
child runs the engine again with the decision-log writer as its only observer
and validation off, while the parent runs the engine that validates every plan
and feeds the other observers. Encoding, digesting and writing the log (about
a third of a run's CPU) then leave the run's critical path; the run costs more
CPU seconds in all and fewer wall seconds.

The child's log is the validated run's log only if both runs took the same
decisions, so the child ends by reporting its :class:`RunEnd` (iterations and
the full :func:`~iterserve.records.codec.state_digest` of its final state)
and :meth:`LogProcess.finish` compares it with the parent's: a difference,
or a child that failed, raises :class:`LogProcessError` naming it. The log
bytes are the ones the in-process writer produces (the tests pin the two
equal).

Only a stream backed by a file descriptor can be shared with a child
(:func:`can_fork_log`); anything else is written in process.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

import orjson

from iterserve.engine.observer import EngineObserver
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.state import SchedulerState

_MAX_ERROR_CHARS = 2000  # of a child's error message sent back to the parent


class LogProcessError(RuntimeError):
    """The log process failed, or its run took other decisions than the parent's."""


@dataclass(frozen=True, slots=True)
class RunEnd:
    """Where a run ended: what the two processes compare."""

    iterations: int
    state_digest: str


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def can_fork_log(stream: IO[str]) -> bool:
    """A second process can write ``stream``: ``fork`` exists, two CPUs are
    usable, and the stream writes to a file descriptor the child inherits."""
    if not hasattr(os, "fork") or usable_cpus() < 2:
        return False
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.StringIO: io.UnsupportedOperation
        return False
    return True


class LogProcess:
    """A forked child running ``write_log`` (which writes and flushes the log
    and returns its run's end). Flush the log stream before starting one: the
    child inherits its buffer. The child leaves by ``os._exit``, so no other
    buffer it inherits is ever flushed twice."""

    def __init__(self, write_log: Callable[[], RunEnd]) -> None:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(read_fd)
            _child_main(write_log, write_fd)
        os.close(write_fd)
        self._pid: int | None = pid
        self._read_fd = read_fd

    def finish(self, parent: RunEnd) -> None:
        """Wait for the child; raise :class:`LogProcessError` unless it wrote
        its log and ended where the parent's run ended."""
        report, status = self._collect()
        if "error" in report:
            raise LogProcessError(f"the decision-log process failed: {report['error']}")
        iterations, digest = report.get("iterations"), report.get("state_digest")
        if not isinstance(iterations, int) or not isinstance(digest, str):
            raise LogProcessError(f"the decision-log process ended without a report "
                                  f"({_describe(status)})")
        child = RunEnd(iterations, digest)
        if child != parent:
            raise LogProcessError(
                f"the decision-log process took other decisions: it ended after "
                f"{child.iterations} iterations at state digest {child.state_digest[:12]}, "
                f"the validated run after {parent.iterations} at {parent.state_digest[:12]}")

    def abandon(self) -> None:
        """Stop the child (the parent's run failed); its log is incomplete."""
        if self._pid is not None:
            with contextlib.suppress(ProcessLookupError):  # it had ended
                os.kill(self._pid, signal.SIGKILL)
        self._collect()

    def _collect(self) -> tuple[dict[str, object], int]:
        """The child's report (read to the end of the pipe) and its wait status."""
        if self._pid is None:
            raise LogProcessError("the decision-log process was already collected")
        with os.fdopen(self._read_fd, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(self._pid, 0)
        self._pid = None
        try:
            report = orjson.loads(data) if data else {}
        except orjson.JSONDecodeError:
            report = {}
        return (report if isinstance(report, dict) else {}), status


class ParentWatch(EngineObserver):
    """The log process's guard against outliving its parent (killed with no
    chance to stop it): every ``every`` steps it checks that the process that
    forked it is still its parent, and exits at once when not."""

    def __init__(self, every: int = 256) -> None:
        self._parent_pid = os.getppid()
        self._every = every
        self._num_steps = 0

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        self._num_steps += 1
        if self._num_steps % self._every == 0 and os.getppid() != self._parent_pid:
            os._exit(1)  # nobody reads this log any more


def _child_main(write_log: Callable[[], RunEnd], write_fd: int) -> None:
    code = 1
    try:
        end = write_log()
        payload = orjson.dumps({"iterations": end.iterations, "state_digest": end.state_digest})
        code = 0
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
        payload = orjson.dumps({"error": f"{type(exc).__name__}: {exc}"[:_MAX_ERROR_CHARS]})
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(write_fd, view):]
        os.close(write_fd)
    finally:
        os._exit(code)  # no atexit handlers, no flush of the buffers copied from the parent


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
