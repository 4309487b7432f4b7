"""Entry point: ``iterserve <command>``. Expected errors become one line on
stderr and exit status 2; only bugs produce tracebacks."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from iterserve.admission.overload import OverloadConfigError
from iterserve.cli import generate, make_model, policies, replay, serve, simulate, sweep, workload
from iterserve.cli.simulate import FlagError
from iterserve.engine.loop import EngineStalled
from iterserve.engine.replay import ReplayDivergence
from iterserve.model.errors import CheckpointError
from iterserve.policies.registry import UnknownPolicy
from iterserve.policies.settings import PolicyConfigError
from iterserve.records.errors import ContractViolation
from iterserve.sim.cost import CostModelError
from iterserve.sim.traces import TraceError
from iterserve.sim.workload import WorkloadError
from iterserve.sim.workload_spec import WorkloadSpecError

EXPECTED_ERRORS = (CheckpointError, WorkloadError, UnknownPolicy, PolicyConfigError, ReplayDivergence, ContractViolation,
                   EngineStalled, FileNotFoundError, FlagError, OverloadConfigError, CostModelError,
                   WorkloadSpecError, TraceError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iterserve", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in (simulate, sweep, replay, policies, generate, make_model, workload, serve):
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except EXPECTED_ERRORS as exc:
        print(f"iterserve {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
