"""Input files (workloads, specs, traces, decision logs, event logs,
profiles) opened and read with a size limit and a clear error.

A device (``/dev/zero``, ``/dev/urandom``: endless) or a socket is refused
before a byte is read; a regular file over its kind's limit is refused from
its size; a pipe is read up to the limit and refused past it. Without this,
``--workload /dev/zero`` was read until the kernel killed the process.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

#: a JSON document read whole (a workload, a spec, a profile): a workload of 100,000
#: requests is about 20 MB; the JSON parse holds several times the text
MAX_DOCUMENT_BYTES = 1 << 30
#: a decision log (read a piece at a time by replay) or a run registry read whole: a
#: long run's log is GBs
MAX_LOG_BYTES = 16 << 30
#: the pieces :func:`read_input_chunks` reads at a time
CHUNK_BYTES = 1 << 16


def _where(path: Path, label: str, named: bool) -> str:
    return f"{label}{path}: " if named else label


def open_input(path: Path, error: type[Exception], label: str = "", *,
               named: bool = True) -> BinaryIO:
    """``path`` opened for binary reading once it is known to be a regular
    file or a pipe; else ``error`` naming it (after ``label``, e.g. a flag;
    not ``named`` where the caller's error names the path itself)."""
    where = _where(path, label, named)
    try:
        stream = Path(path).open("rb")  # noqa: SIM115 (the caller closes it)
    except FileNotFoundError:
        raise error(f"{where}no such file") from None
    except IsADirectoryError:
        raise error(f"{where}is a directory, not a file") from None
    except OSError as exc:
        raise error(f"{where}cannot read ({exc.strerror or exc})") from None
    mode = os.fstat(stream.fileno()).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        stream.close()
        kind = "a directory" if stat.S_ISDIR(mode) else "a device or socket"
        raise error(f"{where}is {kind}, not a file")
    return stream


def read_input_bytes(path: Path, error: type[Exception], max_bytes: int,
                     label: str = "", *, named: bool = True) -> bytes:
    """The bytes of ``path`` (:func:`open_input`), at most ``max_bytes``.
    A regular file is read in one piece of its size (a pipe in pieces): a
    read of ``max_bytes`` would reserve the limit, GBs, for a small file."""
    pieces = list(_pieces(path, error, max_bytes, label, named, is_whole_first=True))
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def read_input_chunks(path: Path, error: type[Exception], max_bytes: int,
                      label: str = "", *, named: bool = True) -> Iterator[bytes]:
    """The bytes of ``path`` a :data:`CHUNK_BYTES` piece at a time, in
    order, with :func:`read_input_bytes`'s checks and messages (a regular
    file over ``max_bytes`` is refused before its first piece, a pipe once
    it passes the limit); the file is closed when the iterator is."""
    return _pieces(path, error, max_bytes, label, named, is_whole_first=False)


def _pieces(path: Path, error: type[Exception], max_bytes: int, label: str, named: bool,
            is_whole_first: bool) -> Iterator[bytes]:
    """``is_whole_first``: the first piece is a regular file's whole size."""
    where = _where(path, label, named)
    with open_input(path, error, label, named=named) as stream:
        size = os.fstat(stream.fileno()).st_size
        if size > max_bytes:
            raise error(f"{where}{size} bytes, over the {max_bytes}-byte limit "
                        "of an input file")
        num_bytes_read = 0
        num_bytes_next = size if is_whole_first and size else CHUNK_BYTES
        while True:
            try:
                piece = stream.read(num_bytes_next)
            except OSError as exc:
                raise error(f"{where}cannot read ({exc.strerror or exc})") from None
            if not piece:
                return
            num_bytes_read += len(piece)
            if num_bytes_read > max_bytes:
                raise error(f"{where}more than the {max_bytes}-byte limit of an input file")
            num_bytes_next = CHUNK_BYTES
            yield piece
