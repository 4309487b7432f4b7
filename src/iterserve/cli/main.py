"""Entry point: ``iterserve <command>``.

Every failure is one line on stderr and exit status 2, never a traceback:
a bad flag (``cli/flag_types.py``), an expected error (bad workload field,
unknown policy, damaged checkpoint, replay divergence) and, caught last here,
anything else, named by its type. Nothing is written by a run that fails.
A reader that closes the pipe early (``iterserve policies | head``) ends the
command quietly with status 141, as a process killed by SIGPIPE would.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from typing import TextIO

from iterserve.admission.overload import OverloadConfigError
from iterserve.cli import (
    bench,
    build_kernels,
    compare,
    generate,
    make_model,
    policies,
    profile,
    replay,
    sensitivity,
    serve,
    simulate,
    sweep,
    workload,
)
from iterserve.cli.flag_types import OneLineParser, UsageError
from iterserve.cli.output_files import OutputFileError
from iterserve.cli.signals import EXIT_TERMINATED, Terminated
from iterserve.cli.simulate import FlagError
from iterserve.cost import CostModelError
from iterserve.engine.loop import EngineStalled
from iterserve.kv.pool_size import KvPoolSizeError
from iterserve.lab.bench_run import BenchInputError
from iterserve.lab.compare import CompareError
from iterserve.lab.coordinates import CoordinateError
from iterserve.model.errors import CheckpointError
from iterserve.plan.feasibility import InfeasibleRun
from iterserve.policies.registry import UnknownPolicy
from iterserve.policies.settings import PolicyConfigError
from iterserve.records.errors import ContractViolation
from iterserve.records.failures import failure_label
from iterserve.records.vocabulary import RenamedWarning
from iterserve.records.workload import WorkloadError
from iterserve.sim.follower import FollowerError
from iterserve.sim.replay import ReplayDivergence
from iterserve.sim.traces import TraceError
from iterserve.sim.workload_spec import WorkloadSpecError

DESCRIPTION = """\
A continuous-batching LLM server whose scheduler can be checked and replayed,
and a lab that runs the same scheduler on a simulated clock. Serve a model
(serve, generate), build workloads (workload), simulate and compare
scheduling policies (simulate, compare, sweep, replay), and measure (profile,
bench). Any error is one line on stderr and exit status 2; a run that fails
writes nothing. Documentation: README.md and docs/README.md."""

EXPECTED_ERRORS = (CheckpointError, WorkloadError, UnknownPolicy, PolicyConfigError, ReplayDivergence, ContractViolation,
                   EngineStalled, InfeasibleRun, FileNotFoundError, FlagError, OverloadConfigError, CostModelError,
                   WorkloadSpecError, TraceError, CompareError, CoordinateError, KvPoolSizeError,
                   BenchInputError, FollowerError, OutputFileError)
EXIT_BROKEN_PIPE = 128 + 13  # SIGPIPE
EXIT_INTERRUPTED = 128 + 2  # SIGINT


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="iterserve", description=DESCRIPTION)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in (simulate, sweep, replay, policies, generate, make_model, workload, serve,
                   profile, compare, sensitivity, bench, build_kernels):
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    with warnings.catch_warnings():  # the hook is this call's, not the process's
        warnings.showwarning = _show_warning
        return _main(argv)


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """An older name a user wrote is one line naming the new one, not a
    warning with a source path and line of iterserve's."""
    if issubclass(category, RenamedWarning):
        print(f"iterserve: warning: {message}", file=sys.stderr)
        return
    _SHOW_WARNING(message, category, filename, lineno, file, line)


_SHOW_WARNING = warnings.showwarning


def _main(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        return _fail(str(exc))
    prefix = f"iterserve {args.command}: error:"
    try:
        status = int(args.run(args))
        sys.stdout.flush()  # a closed pipe surfaces here, not in the interpreter's exit flush
        return status
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:  # Ctrl-C: one line and 130, not a traceback
        print(f"iterserve {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:  # SIGTERM during start-up: one line and 143
        print(f"iterserve {args.command}: terminated during start-up", file=sys.stderr)
        return EXIT_TERMINATED
    except ContractViolation as exc:  # named by its 0x0E failure class
        return _fail(f"{prefix} {failure_label(exc.code)}: {exc}")
    except EXPECTED_ERRORS as exc:
        return _fail(f"{prefix} {exc}")
    except Exception as exc:  # the top-level net: one line, never a traceback
        return _fail(f"{prefix} {type(exc).__name__}: {exc}")


def _fail(message: str) -> int:
    print(" ".join(message.split()), file=sys.stderr)
    return 2


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (captured in tests)
        pass


if __name__ == "__main__":
    sys.exit(main())
