"""A log file that rolls over by size, for ``iterserve serve``'s streamed logs.

``PATH`` is the file being written. When a write would take it past
``max_bytes``, it is renamed ``PATH.1`` (``PATH.1`` to ``PATH.2`` and so on;
the oldest past ``max_backups`` is deleted) and a new ``PATH`` is begun. A
write is never split: every writer here writes whole lines, so each file
holds whole lines, and the segments read oldest first
(``PATH.N ... PATH.1 PATH``) concatenate to the log written without
rotation, byte for byte.

Not :class:`logging.handlers.RotatingFileHandler`: a logging handler
reports a failed write on stderr and goes on (``handleError``); a decision
or event log that silently lost lines would be silently wrong output, so a
write error here raises.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO


class RotatingTextFile:
    """A text sink (``write``/``flush``/``close``) over ``path``; ``max_bytes``
    None never rolls over. The file is begun empty (a previous run's file at
    ``path`` is replaced, as a log written at shutdown replaced it)."""

    def __init__(self, path: Path, max_bytes: int | None = None, max_backups: int = 0) -> None:
        if max_bytes is not None and max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        if max_backups < 0:
            raise ValueError(f"max_backups must be >= 0, got {max_backups}")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.max_backups = max_backups
        self.num_rollovers = 0
        self._file: BinaryIO = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self._num_bytes = 0

    def segment(self, index: int) -> Path:
        """The file of segment ``index``: 0 is ``path`` itself, 1 the last one rolled over."""
        return self.path if index == 0 else self.path.with_name(f"{self.path.name}.{index}")

    def write(self, text: str) -> int:
        data = text.encode()
        if self.max_bytes is not None and self._num_bytes and \
                self._num_bytes + len(data) > self.max_bytes:
            self._roll_over()
        self._file.write(data)
        self._num_bytes += len(data)
        return len(text)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

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
