"""A call run in a forked child: its value or its error comes back pickled.

The mechanism under a simulated run's follower (:mod:`iterserve.sim.follower`)
and the report's plots drawn beside its other figures
(:func:`iterserve.sim.report.write_metric_outputs`). The child inherits the
parent's memory (copy on write) and its open files: flush what it writes
before starting one. It leaves by ``os._exit``, so no buffer it inherited is
flushed twice and no ``atexit`` handler runs in it.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

_T = TypeVar("_T")
_MAX_ERROR_CHARS = 2000  # of a child's error message sent back
_PIPE_BYTES = 1 << 20  # the buffer that reads and writes the report


class ForkedError(RuntimeError):
    """The child failed, or ended without sending its value back."""


class ForkedCall:
    """``call()`` run in a forked child from the start. :meth:`value` waits
    for it; :meth:`collect` gives its report as it came (``{"value": ...}``
    or ``{"error": "Type: message"}``, ``{}`` for none) and its wait status;
    :meth:`kill` stops it. ``close_in_child``: file descriptors the child
    closes first (the parent's ends of pipes it shares with the child)."""

    def __init__(self, call: Callable[[], Any], close_in_child: Iterable[int] = ()) -> None:
        report_read, report_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(report_read)
            for fd in close_in_child:
                os.close(fd)
            _child_main(call, report_write)
        os.close(report_write)
        self._pid: int | None = pid
        self._report_fd = report_read

    def value(self) -> Any:
        """Wait for the child; its call's value. :class:`ForkedError` with
        the child's error, or when it ended without a value."""
        report, status = self.collect()
        if "error" in report:
            raise ForkedError(report["error"])
        if "value" not in report:
            raise ForkedError(f"the child ended without its value ({describe(status)})")
        return report["value"]

    def kill(self) -> None:
        """Stop the child (its work is not wanted) and reap it."""
        if self._pid is not None:
            with contextlib.suppress(ProcessLookupError):  # it had ended
                os.kill(self._pid, signal.SIGKILL)
            self.collect()

    def collect(self) -> tuple[dict[str, Any], int]:
        """The child's report (unpickled as it streams in, then the pipe read
        to its end) and its wait status."""
        if self._pid is None:
            raise ForkedError("the child process was already collected")
        report: Any = {}
        with os.fdopen(self._report_fd, "rb", buffering=_PIPE_BYTES) as pipe:
            try:
                report = pickle.load(pipe)
            except Exception:  # noqa: BLE001 - no report, or a truncated one (the child was killed)
                report = {}
            while pipe.read(_PIPE_BYTES):  # whatever follows: the child never blocks on it
                pass
        _, status = os.waitpid(self._pid, 0)
        self._pid = None
        return (report if isinstance(report, dict) else {}), status


class BesideCall(Generic[_T]):
    """``call``'s value, computed beside the caller: in a forked child started
    at once when ``fork`` is true, else here when :meth:`value` is asked
    (a short run, one CPU: a child would cost more than it saves)."""

    def __init__(self, call: Callable[[], _T], *, fork: bool) -> None:
        self._call: Callable[[], _T] | None = call
        self._child = ForkedCall(call) if fork else None

    @property
    def is_forked(self) -> bool:
        return self._child is not None

    def value(self) -> _T:
        """The call's value (:class:`ForkedError` for a child's failure), once:
        the call and what it holds are let go here, whatever its outcome."""
        call, self._call = self._call, None
        if call is None:
            raise ForkedError("the value was already taken")
        value: _T = call() if self._child is None else self._child.value()
        return value

    def kill(self) -> None:
        """Stop a child whose value is not wanted (nothing once it was read)."""
        if self._child is not None:
            self._child.kill()


def _child_main(call: Callable[[], Any], write_fd: int) -> None:
    code = 1
    report: dict[str, Any]
    try:
        report = {"value": call()}
        code = 0
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
        report = {"error": f"{type(exc).__name__}: {exc}"[:_MAX_ERROR_CHARS]}
    try:  # streamed (pickle frames): a long run's traces are never one buffer here
        with os.fdopen(write_fd, "wb", buffering=_PIPE_BYTES) as pipe:
            pickle.dump(report, pipe, pickle.HIGHEST_PROTOCOL)
    except BaseException:  # noqa: BLE001 - the parent reads a truncated report as none
        code = 1
    finally:
        os._exit(code)  # no atexit handlers, no flush of the buffers copied from the parent


def describe(status: int) -> str:
    """A wait status in words."""
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
