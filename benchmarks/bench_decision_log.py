"""Decision-log encoder benchmark (issue 15 step 1): the stdlib ``json``
encoder (sort_keys, compact) against orjson (OPT_SORT_KEYS) and msgspec
(order="sorted") on the exact objects a run logs.

A generated workload (Poisson arrivals at 20 req/s on the ms clock, prompts
32..1024, outputs 16..400, a 4,000-block pool of 16 rows) runs under the
``vllm`` policy with the linear cost model. At every step the benchmark
builds the log line and the canonical state (what ``state_digest`` hashes)
and times each encoder on both, taking the best of ``--repeats`` per object
(the machine is shared: the minimum is the least disturbed figure), and
checks every encoding is byte-identical to the stdlib's.

    .venv/bin/python benchmarks/bench_decision_log.py [--num-requests 2000] [--repeats 3]
    .venv/bin/python benchmarks/bench_decision_log.py --end-to-end [--repeats 3]

``--end-to-end`` times whole simulated runs writing the decision log to a
file, alternating the stdlib encoder and the adopted one (the benchmark
swaps ``records.codec``'s encoder; the library never does), best of
``--repeats`` each, and checks both logs are byte-identical.
    .venv/bin/python benchmarks/bench_decision_log.py --write-workload w.json  # for simulate
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import orjson

from iterserve.cost import parse_cost_model
from iterserve.engine.decision_log import iteration_line
from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.policies.registry import policy_for
from iterserve.records.canonical_json import canonical_json
from iterserve.records.codec import state_to_json
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.spec import Capacity, KvSpec, WorkloadManifest
from iterserve.records.state import SchedulerState
from iterserve.records.workload import online_to_json
from iterserve.sim.generators import RandomWorkloadConfig, random_workload
from iterserve.sim.report import costed_executor

COST_MODEL = "linear:5,0.02,0.5"


def _stdlib(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _orjson(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


_MSGSPEC = msgspec.json.Encoder(order="sorted")
ENCODERS: dict[str, Callable[[Any], bytes]] = {
    "json (sort_keys)": _stdlib, "orjson (OPT_SORT_KEYS)": _orjson,
    "msgspec (order=sorted)": _MSGSPEC.encode,
    "adopted (orjson + guard)": lambda obj: canonical_json(obj).encode(),
}


def make_manifest(num_requests: int, seed: int = 0) -> WorkloadManifest:
    config = RandomWorkloadConfig(num_requests=num_requests, min_prompt_tokens=32,
                                  max_prompt_tokens=1024, min_output_tokens=16,
                                  max_output_tokens=400, mean_interarrival=50.0)
    capacity = Capacity(max_num_batched_tokens=2048, max_num_seqs=256)
    manifest = random_workload(config, capacity, seed, clock="ms")
    online = dataclasses.replace(manifest.online, kv=KvSpec(num_kv_blocks=4000, block_size=16))
    return WorkloadManifest(online, manifest.hidden)


def write_workload(path: Path, manifest: WorkloadManifest) -> None:
    obj = online_to_json(manifest.online)
    obj["fixture_only_hidden_truth"] = {
        "realized_output_tokens": dict(manifest.hidden.realized_output_tokens)}
    path.write_text(json.dumps(obj))


@dataclasses.dataclass
class EncoderTimer(EngineObserver):
    """Times every encoder on every logged line and canonical state."""

    repeats: int
    seconds: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    num_bytes: dict[str, int] = dataclasses.field(default_factory=lambda: {"line": 0, "state": 0})
    num_objects: int = 0

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        self.num_objects += 1
        for kind, obj in (("line", iteration_line(state, plan, result)),
                          ("state", state_to_json(state))):
            expected = _stdlib(obj)
            self.num_bytes[kind] += len(expected)
            for name, encode in ENCODERS.items():
                best = float("inf")
                for _ in range(self.repeats):
                    began = time.perf_counter()
                    data = encode(obj)
                    best = min(best, time.perf_counter() - began)
                assert data == expected, f"{name} differs from json on a {kind}"
                self.seconds.setdefault(name, {"line": 0.0, "state": 0.0})[kind] += best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write-workload", type=Path, help="write the workload JSON and stop")
    parser.add_argument("--end-to-end", action="store_true",
                        help="time whole logged runs, stdlib encoder vs adopted")
    args = parser.parse_args()
    manifest = make_manifest(args.num_requests)
    if args.write_workload:
        write_workload(args.write_workload, manifest)
    elif args.end_to_end:
        end_to_end(manifest, args.repeats)
    else:
        encoders(manifest, args.num_requests, args.repeats)


def end_to_end(manifest: WorkloadManifest, repeats: int) -> None:
    import tempfile

    from iterserve.records import codec
    from iterserve.records.canonical_json import stdlib_canonical_json
    from iterserve.sim.report import RunConfig, run_simulation

    model = parse_cost_model(COST_MODEL)
    config = RunConfig(policy_for("vllm", manifest.online, cost_model=model), model)
    best: dict[str, float] = {}
    logs: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            for name, encode in (("json", stdlib_canonical_json), ("orjson", canonical_json)):
                codec.canonical_json = encode  # type: ignore[attr-defined]
                path = Path(tmp) / f"{name}.jsonl"
                began = time.perf_counter()
                with path.open("w") as stream:
                    run = run_simulation(manifest, config, stream)
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - began)
                logs[name] = path.read_bytes()
    codec.canonical_json = canonical_json  # type: ignore[attr-defined]
    assert logs["json"] == logs["orjson"], "the logs differ"
    print(f"{len(manifest.online.requests)} requests, vllm, {run.engine.num_iterations} "
          f"iterations, log {len(logs['json']) / 1e6:.1f} MB byte-identical; best of {repeats}:")
    for name, seconds in best.items():
        print(f"  {name:8s} {seconds:6.2f} s  ({best['json'] / seconds:4.2f}x)")


def encoders(manifest: WorkloadManifest, num_requests: int, repeats: int) -> None:
    model = parse_cost_model(COST_MODEL)
    timer = EncoderTimer(repeats)
    engine = Engine(manifest.online, policy_for("vllm", manifest.online, cost_model=model),
                    costed_executor(manifest, model), [timer])
    engine.run()
    print(f"{num_requests} requests, vllm, {engine.num_iterations} iterations: "
          f"{timer.num_objects} log lines ({timer.num_bytes['line'] / 1e6:.1f} MB) and "
          f"states ({timer.num_bytes['state'] / 1e6:.1f} MB); every encoding byte-identical")
    base = sum(timer.seconds["json (sort_keys)"].values())
    for name, seconds in timer.seconds.items():
        total = sum(seconds.values())
        print(f"  {name:26s} lines {seconds['line']:6.2f} s  states {seconds['state']:6.2f} s  "
              f"total {total:6.2f} s  ({base / total:4.1f}x)")


if __name__ == "__main__":
    main()
