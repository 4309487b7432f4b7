"""``iterserve simulate``: run a workload file on the simulated executor."""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

from iterserve.engine.decision_log import DecisionLogWriter
from iterserve.engine.loop import Engine, bind_policy
from iterserve.engine.observer import EngineObserver
from iterserve.engine.trace import RunTrace
from iterserve.policies.registry import make_policy
from iterserve.sim.factory import make_simulated_executor
from iterserve.sim.report import simulate_report
from iterserve.sim.workload import load_workload


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("simulate", help="run a workload on the simulated executor")
    parser.add_argument("--workload", type=Path, required=True, help="workload JSON file")
    parser.add_argument("--policy", required=True, help="policy name (see `iterserve policies`)")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--decision-log", type=Path, help="write the JSONL decision log here")
    parser.add_argument("--max-iterations", type=int, default=None)
    parser.add_argument("--bytes-per-row", type=int, default=None,
                        help="logical KV bytes per row for the 0x09 exposure proxy")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    manifest = load_workload(args.workload)
    policy = make_policy(args.policy)
    trace = RunTrace()
    observers: list[EngineObserver] = [trace]
    executor = make_simulated_executor(manifest)
    with contextlib.ExitStack() as stack:
        if args.decision_log:
            args.decision_log.parent.mkdir(parents=True, exist_ok=True)
            stream = stack.enter_context(args.decision_log.open("w"))
            observers.append(DecisionLogWriter(stream, bind_policy(manifest.online, policy),
                                               executor.capacity()))
        engine = Engine(manifest.online, policy, executor, observers)
        engine.run(max_iterations=args.max_iterations)
    report = simulate_report(manifest.online, policy.policy_id, trace, args.bytes_per_row)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    occupancy = report["slot_occupancy"]
    print(
        f"{policy.policy_id}: {report['iterations']} iterations, "
        f"slot occupancy {report['useful_slot_iterations']}/{report['available_slot_iterations']}"
        f" = {occupancy} ({report['slot_occupancy_label']}) -> {args.out / 'report.json'}"
    )
    return 0
