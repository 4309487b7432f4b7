"""One policy decision against the length of the waiting queue.

A state whose waiting queue holds N fresh 100-token requests (a 1,000-block
pool of 16 rows, budgets 2048 tokens and 256 sequences), and the time of one
``policy.choose(state)``, the mean over ``--repeat`` successive states (each
with one more arrival), for each policy and each N. A policy that stops at the first request that does not fit takes
about the same time at every N; one that orders the whole queue grows with it.

    .venv/bin/python benchmarks/bench_policy_queue.py
    .venv/bin/python benchmarks/bench_policy_queue.py --sizes 1000 50000 --policies vllm edf
"""

from __future__ import annotations

import argparse
import time

from iterserve.engine.loop import initial_state
from iterserve.lab.machine import cpu_model
from iterserve.policies.registry import policy_for
from iterserve.records.spec import Capacity, OnlineWorkload, RequestSpec
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.records.transition import with_arrivals

POLICIES = ("vllm", "refill", "sarathi-serve", "edf", "least-slack", "vtc", "priority-aging",
            "mlfq")


def waiting_state(num_waiting: int) -> tuple[OnlineWorkload, SchedulerState]:
    specs = tuple(RequestSpec(f"r{i}", 0.0, 100, 50) for i in range(num_waiting))
    workload = OnlineWorkload("queue", "iteration", Capacity(2048, 256), specs)
    state = initial_state(workload, CapacityFacts(16, 1000, 1000))
    return workload, with_arrivals(state, [(spec, i) for i, spec in enumerate(specs)])


def choose_us(policy_name: str, num_waiting: int, repeat: int) -> float:
    """The mean time of one choose over ``repeat`` successive states, each
    the last with one more arrival: a policy that keeps its waiting order
    (plan/kept_order.py) pays for the change, as in a run, not for reading
    the queue afresh (the first choose, untimed, reads it)."""
    workload, state = waiting_state(num_waiting)
    policy = policy_for(policy_name, workload)
    states = []
    for i in range(repeat):
        spec = RequestSpec(f"late{i}", 0.0, 100, 50)
        state = with_arrivals(state, [(spec, num_waiting + i)])
        states.append(state)
    policy.choose(states[0])
    started = time.perf_counter()
    for state in states[1:]:
        policy.choose(state)
    return (time.perf_counter() - started) / max(1, repeat - 1) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 50_000])
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    print(f"CPU: {cpu_model()}")
    print("| policy | " + " | ".join(f"N = {n:,}" for n in args.sizes) + " |")
    print("|---|" + "---:|" * len(args.sizes))
    for name in args.policies:
        cells = [f"{choose_us(name, n, args.repeat):,.0f} us" for n in args.sizes]
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
