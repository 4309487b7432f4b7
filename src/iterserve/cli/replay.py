"""``iterserve replay``: re-derive every plan of a decision log."""

from __future__ import annotations

import argparse
from pathlib import Path

from iterserve.engine.replay import replay


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("replay", help="re-derive a decision log; non-zero on divergence")
    parser.add_argument("log", type=Path, help="decision log (JSONL) written by --decision-log")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    report = replay(args.log)
    print(
        f"replay ok: {report.num_iterations} iterations re-derived bit for bit "
        f"({report.policy_id}@{report.policy_version})"
    )
    return 0
