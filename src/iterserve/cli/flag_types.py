"""Flag types with ranges (argparse ``type=``) and a parser whose errors are
one line: every bad flag is refused before anything runs or is written."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from iterserve.records.vocabulary import warn_renamed


class UsageError(Exception):
    """A flag is malformed; ``str()`` is the whole one-line message."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but an error raises :class:`UsageError` (one line, exit 2 in
    ``cli/main.py``) instead of printing the usage block and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {' '.join(message.split())}")


def int_at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def finite_float(minimum: float | None = None, maximum: float | None = None, *,
                 exclusive_min: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        if minimum is not None and (value <= minimum if exclusive_min else value < minimum):
            raise argparse.ArgumentTypeError(
                f"must be {'>' if exclusive_min else '>='} {minimum}, got {text}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {text}")
        return value

    parse.__name__ = "number"
    return parse


def non_empty(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("must be a non-empty string")
    return text


def output_dir(text: str) -> Path:
    """A directory to write into: absent (created later) or an existing directory."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a directory")
    _check_parents(path, text)
    return path


def output_file(text: str) -> Path:
    """A file to write: absent or a regular file (a symlink followed to its
    end), whose parent is not a file; never a device, a pipe or a directory."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory")
    if path.exists() and not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a regular file (a device, pipe or "
                                         "socket); only a regular file is written")
    _check_parents(path, text)
    return path


def _check_parents(path: Path, text: str) -> None:
    if any(parent.exists() and not parent.is_dir() for parent in path.parents):
        raise argparse.ArgumentTypeError(f"{text}: a parent path is not a directory")


POSITIVE_INT = int_at_least(1)
NON_NEGATIVE_INT = int_at_least(0)
SEED = int_at_least(0, 2**63 - 1)
POSITIVE_MS = finite_float(0.0, exclusive_min=True)


def renamed_flag(new: str) -> type[argparse.Action]:
    """An action for an older flag spelling: stores into the new flag's
    destination and warns once, naming the flag to use instead."""

    class _Renamed(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                     values: object, option_string: str | None = None) -> None:
            warn_renamed(f"flag {option_string}", new)
            setattr(namespace, self.dest, values)

    return _Renamed


def add_attention_backend_flag(parser: argparse.ArgumentParser) -> None:
    """--attention-backend, one of EngineConfig's names (docs/cuda.md)."""
    from iterserve.config import ATTENTION_BACKEND_NAMES

    parser.add_argument("--attention-backend", default="auto", choices=ATTENTION_BACKEND_NAMES,
                        help="auto: native kernels on CPU, one batched attention call per "
                             "layer on CUDA; torch: the per-request path; cpp: the native "
                             "kernels (CPU); flex / varlen: the batched path with FlexAttention "
                             "(any device, slow on CPU) / varlen flash attention (CUDA); "
                             "default %(default)s")
