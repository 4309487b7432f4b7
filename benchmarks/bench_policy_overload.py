"""Queue-ordering policies under 2x overload: run time against the number of requests.

The overload workload of ``bench_sim_scale.py`` (Poisson arrivals at 20
req/s, prompts uniform in [32, 1024], outputs in [16, 400], a 4,000-block
pool of 16-token blocks, budgets 2048 tokens and 256 sequences, cost model
``linear:5,0.05,0.5``: the pool serves about 8 req/s of the 20 offered, so
the waiting queue grows through the run), with four clients of weights
1, 1, 2, 4 and priorities 0..3 (so ``vtc`` picks among clients and
``priority-aging`` ages classes) and two SLO classes (TTFT 2 s / TBT 200 ms
and TTFT 10 s / TBT 1 s, so ``edf`` and ``least-slack`` rank by real
deadlines). Each (policy, size) runs the engine alone (validation on, no
observer) in a fresh process and reports its CPU seconds, the iterations,
the waiting queue at the end and how many waiting views the policy's kept
order re-keyed and how often it re-read the whole queue
(``plan/kept_order.py``); ``growth`` is the CPU time's ratio to the
previous size (2.0 per doubling is linear).

    .venv/bin/python benchmarks/bench_policy_overload.py            # 5,000 / 10,000 / 20,000
    .venv/bin/python benchmarks/bench_policy_overload.py --sizes 500 1000 --policies edf
    .venv/bin/python benchmarks/bench_policy_overload.py --json out.json
    # before/after: the same script on another tree (e.g. main before the kept orders)
    PYTHONPATH=OTHER_TREE/src .venv/bin/python benchmarks/bench_policy_overload.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

from iterserve.cost import parse_cost_model
from iterserve.engine.loop import Engine
from iterserve.lab.machine import cpu_model, interpreter
from iterserve.policies.registry import policy_for
from iterserve.sim.collector import collector_held_back
from iterserve.sim.generators import generate_workload
from iterserve.sim.report import costed_executor
from iterserve.sim.workload_spec import parse_spec

POLICIES = ("edf", "least-slack", "vtc", "mlfq")
SIZES = (5_000, 10_000, 20_000)
COST_MODEL = "linear:5,0.05,0.5"  # bench_sim_scale.py's overload spec
RATE_PER_S = 20.0


def spec(num_requests: int) -> dict[str, Any]:
    lengths = {"prompt_tokens": {"kind": "uniform", "min": 32, "max": 1024},
               "output_tokens": {"kind": "uniform", "min": 16, "max": 400}}
    clients = [{"client_id": f"c{i}", "weight": weight, "priority": i,
                "slo_class": "tight" if i % 2 == 0 else "loose", **lengths}
               for i, weight in enumerate((1.0, 1.0, 2.0, 4.0))]
    return {
        "workload_id": f"overload-{num_requests}", "seed": 42, "num_requests": num_requests,
        "clock": "ms", "capacity": {"max_num_batched_tokens": 2048, "max_num_seqs": 256},
        "kv": {"num_kv_blocks": 4000, "block_size": 16},
        "arrival": {"process": "poisson", "rate_per_s": RATE_PER_S},
        "slo_classes": {"tight": {"ttft_ms": 2000, "tbt_ms": 200},
                        "loose": {"ttft_ms": 10000, "tbt_ms": 1000}},
        "clients": clients,
    }


def kept_orders(policy: object) -> list[Any]:
    """The policy's kept orders (none on a tree before plan/kept_order.py:
    the script then runs there too, for a before/after pair)."""
    try:
        from iterserve.plan.kept_order import KeptOrder
    except ImportError:
        return []
    return [value for value in vars(policy).values() if isinstance(value, KeptOrder)]


def run_one(policy_name: str, num_requests: int) -> dict[str, Any]:
    """One run in this process."""
    manifest = generate_workload(parse_spec(spec(num_requests)))
    model = parse_cost_model(COST_MODEL)
    policy = policy_for(policy_name, manifest.online, cost_model=model)
    engine = Engine(manifest.online, policy, costed_executor(manifest, model), [])
    started = time.process_time()
    with collector_held_back():
        engine.run()
    cpu_s = time.process_time() - started
    kept = kept_orders(policy)
    return {"policy": policy_name, "num_requests": num_requests, "cpu_s": round(cpu_s, 3),
            "iterations": engine.num_iterations, "num_live_at_end": engine.state.num_live,
            "num_rekeyed": sum(order.num_rekeyed for order in kept),
            "num_rebuilds": sum(order.num_rebuilds for order in kept)}


def run_fresh(policy_name: str, num_requests: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--one", policy_name, str(num_requests)],
                         check=True, capture_output=True, text=True)
    row: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--one", nargs=2, metavar=("POLICY", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one[0], int(args.one[1]))))
        return 0
    print(f"CPU: {cpu_model()}; {interpreter()}")
    print("| policy | requests | CPU s | growth | iterations | live at end | re-keyed | re-reads |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for name in args.policies:
        previous = None
        for size in args.sizes:
            row = run_fresh(name, size)
            growth = "" if previous is None else f"{row['cpu_s'] / previous:.2f}x"
            previous = row["cpu_s"]
            rows.append(row)
            print(f"| {name} | {size:,} | {row['cpu_s']:.1f} | {growth} | {row['iterations']:,} "
                  f"| {row['num_live_at_end']:,} | {row['num_rekeyed']:,} "
                  f"| {row['num_rebuilds']:,} |", flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
