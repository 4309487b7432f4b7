"""A log file that rolls over by size, for ``iterserve serve``'s streamed logs.

``PATH`` is the file being written. When a write would take it past
``max_bytes``, it is renamed ``PATH.1`` (``PATH.1`` to ``PATH.2`` and so on;
the oldest past ``max_backups`` is deleted) and a new ``PATH`` is begun. A
write is never split: every writer here writes whole lines, so each file
holds whole lines, and the segments read oldest first
(``PATH.N ... PATH.1 PATH``) concatenate to the log written without
rotation, byte for byte.

A failed write or roll-over (a full disk) must not stop the server that
writes the log: it is logged once as an error naming the file, the log ends
there (its last line may be cut short) and later writes are dropped;
:attr:`RotatingTextFile.error` keeps it, and ``serve`` exits 1 at shutdown
naming it. (Not :class:`logging.handlers.RotatingFileHandler`: it reports
every failed write on stderr and goes on writing after the gap, so the log
would silently miss lines in its middle.)
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import BinaryIO

logger = logging.getLogger(__name__)


class RotatingTextFile:
    """A text sink (``write``/``flush``/``close``) over ``path``; ``max_bytes``
    None never rolls over. The file is begun empty (a previous run's file at
    ``path`` is replaced, as a log written at shutdown replaced it)."""

    def __init__(self, path: Path, max_bytes: int | None = None, max_backups: int = 0,
                 label: str = "log") -> None:
        if max_bytes is not None and max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        if max_backups < 0:
            raise ValueError(f"max_backups must be >= 0, got {max_backups}")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.max_backups = max_backups
        self.num_rollovers = 0
        self.label = label  # how errors name the file (a flag)
        self.error: OSError | None = None  # the write that failed; nothing is written after it
        self._file: BinaryIO = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self._num_bytes = 0

    def segment(self, index: int) -> Path:
        """The file of segment ``index``: 0 is ``path`` itself, 1 the last one rolled over."""
        return self.path if index == 0 else self.path.with_name(f"{self.path.name}.{index}")

    def write(self, text: str) -> int:
        if self.error is not None:
            return len(text)
        data = text.encode()
        try:
            if self.max_bytes is not None and self._num_bytes and \
                    self._num_bytes + len(data) > self.max_bytes:
                self._roll_over()
            self._file.write(data)
        except OSError as exc:
            self._fail(exc)
        self._num_bytes += len(data)
        return len(text)

    def flush(self) -> None:
        if self.error is None:
            try:
                self._file.flush()
            except OSError as exc:
                self._fail(exc)

    def close(self) -> None:
        try:
            self._file.close()
        except OSError as exc:
            if self.error is None:
                self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        self.error = exc
        logger.error("%s %s: cannot be written (%s); the log ends here, the server goes on",
                     self.label, self.path, exc.strerror or exc)

    def _roll_over(self) -> None:
        self._file.close()
        if self.max_backups == 0:
            self.path.unlink()
        # each segment moves one up; the one moved onto the last backup replaces (deletes) it
        for index in range(self.max_backups - 1, -1, -1):
            source = self.segment(index)
            if source.exists():
                os.replace(source, self.segment(index + 1))
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self._num_bytes = 0
        self.num_rollovers += 1
