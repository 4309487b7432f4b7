"""Peak memory and wall seconds of ``iterserve replay`` on a long simulated run.

Builds ``bench_sim_scale.py``'s steady workload at --num-requests (Poisson
arrivals at 20 req/s, prompts 32..1024, outputs 16..400, policy ``vllm``,
cost model ``linear:8,0.02,0.1``), simulates it once with a decision log
(plain, or zstd-compressed with --zst), then replays that log with each
``iterserve`` executable given (default: this tree's), one after the other,
each in a fresh process: its wall seconds and its own peak RSS
(``os.wait4``'s resource usage of that child).

    .venv/bin/python benchmarks/bench_replay_rss.py --num-requests 20000
    .venv/bin/python benchmarks/bench_replay_rss.py --num-requests 200 --workload   # smoke

``--workload`` replays with the workload file, so the simulated executor
re-derives every result too. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_sim_scale import COST_MODEL, POLICY, spec

HERE_ITERSERVE = Path(sys.executable).with_name("iterserve")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=20_000)
    parser.add_argument("--zst", action="store_true", help="a zstd-compressed decision log")
    parser.add_argument("--workload", action="store_true",
                        help="replay with --workload (re-derive the results as well)")
    parser.add_argument("--iterserve", nargs="+", type=Path, default=[HERE_ITERSERVE],
                        help="iterserve executables to replay with (e.g. two trees' .venv/bin)")
    return parser.parse_args()


def simulated_log(tmp: Path, num_requests: int, is_zst: bool) -> tuple[Path, Path]:
    (tmp / "spec.json").write_text(json.dumps(spec(num_requests)))
    workload, log = tmp / "workload.json", tmp / ("decisions.jsonl" + (".zst" if is_zst else ""))
    subprocess.run([HERE_ITERSERVE, "workload", "gen", tmp / "spec.json", "-o", workload],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([HERE_ITERSERVE, "simulate", "--workload", workload, "--policy", POLICY,
                    "--cost-model", COST_MODEL, "--out", tmp / "out", "--no-plots",
                    "--decision-log", log], check=True, stdout=subprocess.DEVNULL)
    return workload, log


def replay_once(iterserve: Path, log: Path, workload: Path | None) -> None:
    command = [iterserve, "replay", log, *(["--workload", workload] if workload else [])]
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    line = child.stdout.read().strip()  # before waiting: a full pipe would block the child
    _, status, usage = os.wait4(child.pid, 0)
    wall_s = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{iterserve} replay failed: {line}")
    print(f"{iterserve}: {wall_s:.1f} s, peak RSS {usage.ru_maxrss / 1024:.0f} MiB; "
          f"{line[:70]}")


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory() as name:
        workload, log = simulated_log(Path(name), args.num_requests, args.zst)
        print(f"{args.num_requests} requests: log {log.stat().st_size / 2**20:.1f} MiB")
        for iterserve in args.iterserve:
            replay_once(iterserve, log, workload if args.workload else None)


if __name__ == "__main__":
    main()
