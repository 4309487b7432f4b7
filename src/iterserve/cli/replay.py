"""``iterserve replay``: re-derive every plan (and, given the workload file,
every result) of a decision log."""

from __future__ import annotations

import argparse
from pathlib import Path

from iterserve.sim.replay import replay


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("replay", help="check a decision log by making every decision again; exit 2 "
                                   "naming the first difference")
    parser.add_argument("log", type=Path, help="decision log (JSONL, or zstd-compressed JSONL) "
                                          "written by simulate, serve or generate --decision-log")
    parser.add_argument("--workload", type=Path, default=None,
                        help="the simulated run's workload file, with the realized output "
                             "lengths (hidden truth): re-run the simulated executor too, so "
                             "every result and step time is checked, not only the log's "
                             "digest chain")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    report = replay(args.log, args.workload)
    print(
        f"replay ok: {report.num_iterations} iterations re-derived bit for bit "
        f"({report.policy_id}@{report.policy_version}); {report.results_check}"
    )
    return 0
