"""SIGTERM during a command's start-up (a model still loading): one line and
exit 143 (128 + SIGTERM, what a shell reports for a process the signal
ended), not a silent death by the default handler."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

EXIT_TERMINATED = 128 + signal.SIGTERM


class Terminated(Exception):
    """SIGTERM arrived while :func:`terminate_raises` was in force."""


def _raise_terminated(sig: int, frame: FrameType | None) -> None:
    raise Terminated


@contextlib.contextmanager
def terminate_raises() -> Iterator[None]:
    """In the block, SIGTERM raises :class:`Terminated` on the main thread
    (a blocking join there is interrupted); the previous handler after it."""
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
