"""Output files written safely: checked before a run, committed only when it
succeeds, and only ever onto a regular file.

A file output (``--decision-log``, ``--event-log``) is checked at start-up
(:func:`checked_output_file`): its directory exists and is writable, and the
path is absent or a regular file, a symlink followed to its end. It is
written to a temporary file beside the real target and renamed onto it
only once complete (:func:`pending_file`); just before the rename the target
is checked again, so a device node, a directory or a symlink to one put
there meanwhile is never replaced (as root, renaming onto ``/dev/full``
replaced the device node).

A directory output (``simulate --out``) is written into a staging directory
beside it (:func:`staged_directory`) whose entries move into the directory
only when the run succeeds; a failure (a full disk) removes the staging
directory and leaves the output directory as it was.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO


class OutputFileError(ValueError):
    """An output path that cannot be written safely; one line naming it."""


def checked_output_file(path: Path, flag: str, *, may_make_dir: bool = False) -> Path:
    """The real path ``path`` names (symlinks followed), once it is known
    writable: absent or a regular file, in an existing, writable directory
    (or, ``may_make_dir``, one that can be made under a writable one)."""
    real = Path(os.path.realpath(path))
    _check_target(real, path, flag)
    directory = real.parent
    if may_make_dir:
        while not directory.exists() and directory != directory.parent:
            directory = directory.parent
    if not directory.is_dir():
        raise OutputFileError(f"{flag} {path}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputFileError(f"{flag} {path}: the directory {directory} is not writable")
    return real


def _check_target(real: Path, path: Path, flag: str) -> None:
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OutputFileError(f"{flag} {path}: cannot be checked ({exc.strerror})") from None
    if stat.S_ISDIR(mode):
        raise OutputFileError(f"{flag} {path} is a directory")
    if not stat.S_ISREG(mode):
        raise OutputFileError(f"{flag} {path} is not a regular file (a device, pipe or socket); "
                              "only a regular file is written")


@contextlib.contextmanager
def pending_file(path: Path, flag: str, *, buffering: int = -1,
                 may_make_dir: bool = False) -> Iterator[TextIO]:
    """A text stream that becomes ``path`` only when the block succeeds: a
    failed run leaves no partial file and the old one, if any, as it was."""
    real = checked_output_file(path, flag, may_make_dir=may_make_dir)
    try:
        real.parent.mkdir(parents=True, exist_ok=True)  # only where ``may_make_dir``
        fd, tmp_name = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    except OSError as exc:
        raise OutputFileError(f"{flag} {path}: cannot write ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", buffering=buffering) as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())  # a full disk fails here, not after the rename
        os.chmod(tmp_name, 0o644)
        _check_target(real, path, flag)  # nothing swapped in meanwhile
        os.replace(tmp_name, real)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def write_text_file(path: Path, flag: str, text: str, *, may_make_dir: bool = False) -> None:
    """``text`` into ``path`` through :func:`pending_file`."""
    with pending_file(path, flag, may_make_dir=may_make_dir) as stream:
        stream.write(text)


def checked_output_dir(path: Path, flag: str) -> None:
    """``path`` is an existing directory, or absent under an existing writable one."""
    if path.exists():
        if not path.is_dir():
            raise OutputFileError(f"{flag} {path} exists and is not a directory")
        return
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise OutputFileError(f"{flag} {path}: {parent} is not a writable directory")


@contextlib.contextmanager
def staged_directory(out: Path, flag: str) -> Iterator[Path]:
    """A new directory beside ``out`` to write the run's files in; on success
    its entries replace their namesakes in ``out`` (made if absent), on a
    failure it is removed and ``out`` is untouched."""
    checked_output_dir(out, flag)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as exc:
        raise OutputFileError(f"{flag} {out}: cannot write ({exc.strerror})") from None
    try:
        yield stage
        _commit(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _commit(stage: Path, out: Path) -> None:
    os.chmod(stage, 0o755)
    if not out.exists():
        os.replace(stage, out)  # one rename: the directory appears whole
        return
    for entry in sorted(stage.iterdir()):
        target = out / entry.name
        if target.is_symlink() or not target.exists():
            os.replace(entry, target)  # a link in ``out`` is replaced, never followed
        elif target.is_dir():
            shutil.rmtree(target)
            os.replace(entry, target)
        elif target.is_file():
            os.replace(entry, target)
        else:
            raise OutputFileError(f"{target} is not a regular file; it is not replaced")
