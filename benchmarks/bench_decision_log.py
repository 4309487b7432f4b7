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

``--formats`` measures the log's size, not an encoder: the issue-37 overloaded
workload (``bench_sim_scale.py --spec overload``: 20 req/s, cost model
``linear:5,0.05,0.5``, the pool serving about 8 req/s, so the waiting queue
grows through the run) runs under ``vllm``, and every iteration line is
built in format 5 (one array per field) and format 6 (tables) from the same
records: bytes per line of each, the zstd-compressed bytes per line of each
stream (level 3, as a ``.zst`` ``--decision-log`` writes it) and the best
microseconds of building each line's work and completions and encoding it
(the state digest, the same for both, is computed once and not timed). It
projects the 100,000-request run's log from its iteration count (219,076,
measured with format 5 on 2026-12-04); bytes are exact on any machine, the
microseconds only on an idle one:

    .venv/bin/python benchmarks/bench_decision_log.py --formats --num-requests 2000
"""

from __future__ import annotations

import argparse
import dataclasses
import io
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
from iterserve.records.codec import (
    completed_columns,
    plan_to_json,
    result_to_json,
    state_to_json,
    work_columns,
)
from iterserve.records.compressed_text import compressed_text
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.spec import Capacity, KvSpec, WorkloadManifest
from iterserve.records.state import SchedulerState
from iterserve.records.state_digest import StateDigester
from iterserve.records.workload import online_to_json
from iterserve.sim.generators import RandomWorkloadConfig, generate_workload, random_workload
from iterserve.sim.report import costed_executor
from iterserve.sim.workload_spec import parse_spec

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
    parser.add_argument("--formats", action="store_true",
                        help="bytes per iteration line, format 5 against format 6 (and zstd), "
                             "on the overloaded workload")
    args = parser.parse_args()
    if args.formats:
        formats(args.num_requests, args.repeats)
        return
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


# the issue-37 overloaded workload (bench_sim_scale.py --spec overload)
OVERLOAD_COST_MODEL = "linear:5,0.05,0.5"
ITERATIONS_AT_100K = 219_076  # the 100,000-request overload run, measured 2026-12-04


def overload_manifest(num_requests: int) -> WorkloadManifest:
    """``bench_sim_scale.py``'s generated workload: Poisson at 20 req/s,
    prompts 32..1024, outputs 16..400, 4,000 blocks of 16, seed 15."""
    return generate_workload(parse_spec({
        "workload_id": f"scale-{num_requests}", "seed": 15, "num_requests": num_requests,
        "clock": "ms", "capacity": {"max_num_batched_tokens": 2048, "max_num_seqs": 256},
        "kv": {"num_kv_blocks": 4000, "block_size": 16},
        "arrival": {"process": "poisson", "rate_per_s": 20.0},
        "clients": [{"client_id": "c0",
                     "prompt_tokens": {"kind": "uniform", "min": 32, "max": 1024},
                     "output_tokens": {"kind": "uniform", "min": 16, "max": 400}}]}))


def format_5_line(state: SchedulerState, plan: IterationPlan, result: IterationResult,
                  digest: str) -> bytes:
    """The iteration line as format 5 wrote it (the columns as arrays; the
    writer's ``iteration_line`` before format 6, kept here as the baseline)."""
    plan_doc = plan_to_json(plan, with_work=False)
    plan_doc["work"] = work_columns(plan.work)
    result_doc = result_to_json(result, plan, state, with_completed=False)
    result_doc["completed"] = completed_columns(result.completed)
    line = {"type": "iteration", "decision_id": state.decision_id,
            "state_version": state.state_version, "state_digest": digest,
            "policy": {"id": plan.policy_id, "version": plan.policy_version},
            "plan": plan_doc, "result": result_doc}
    if state.prefix_hits:
        line["prefix_hits"] = dict(sorted(state.prefix_hits.items()))
    return canonical_json(line).encode()


def format_6_line(state: SchedulerState, plan: IterationPlan, result: IterationResult,
                  digest: str) -> bytes:
    return canonical_json(iteration_line(state, plan, result, lambda _: digest,
                                         lambda _: {})).encode()


@dataclasses.dataclass
class FormatMeter(EngineObserver):
    """Each iteration line in both formats: bytes, zstd bytes, best us."""

    repeats: int
    num_lines: int = 0
    num_bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    sinks: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self._digester = StateDigester()
        for name in ("format 5", "format 6"):
            raw = io.BytesIO()
            self.sinks[name] = (raw, compressed_text(raw))

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        digest = self._digester.digest(state)
        self.num_lines += 1
        for name, build in (("format 5", format_5_line), ("format 6", format_6_line)):
            best = float("inf")
            for _ in range(self.repeats):
                began = time.perf_counter()
                data = build(state, plan, result, digest)
                best = min(best, time.perf_counter() - began)
            self.seconds[name] = self.seconds.get(name, 0.0) + best
            # the chain: 64 hex digits more per line, as the writer appends it
            self.num_bytes[name] = self.num_bytes.get(name, 0) + len(data) + 76
            self.sinks[name][1].write(data.decode() + "\n")

    def zstd_bytes(self, name: str) -> int:
        raw, sink = self.sinks[name]
        sink.flush()
        return len(raw.getvalue())


def formats(num_requests: int, repeats: int) -> None:
    manifest = overload_manifest(num_requests)
    model = parse_cost_model(OVERLOAD_COST_MODEL)
    meter = FormatMeter(repeats)
    engine = Engine(manifest.online, policy_for("vllm", manifest.online, cost_model=model),
                    costed_executor(manifest, model), [meter])
    engine.run()
    print(f"{num_requests} requests (overload: 20 req/s, {OVERLOAD_COST_MODEL}), vllm, "
          f"{meter.num_lines} iteration lines; best of {repeats} per line:")
    for name in ("format 5", "format 6"):
        per_line = meter.num_bytes[name] / meter.num_lines
        zstd = meter.zstd_bytes(name) / meter.num_lines
        print(f"  {name}: {per_line:7.0f} bytes per line, zstd {zstd:5.0f}; "
              f"{meter.seconds[name] / meter.num_lines * 1e6:6.1f} us per line; "
              f"{ITERATIONS_AT_100K:,} lines (100,000 requests): "
              f"{per_line * ITERATIONS_AT_100K / 2**20:6.0f} MiB, zstd "
              f"{zstd * ITERATIONS_AT_100K / 2**20:4.0f} MiB (header apart)")


if __name__ == "__main__":
    main()
