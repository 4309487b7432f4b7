"""Simulator speed and memory at scale (issue 15 step 1).

The issue's workload: one client, Poisson arrivals at 20 req/s, prompts
uniform in [32, 1024], realized outputs uniform in [16, 400], a 4,000-block
pool of 16-token blocks, token budget 2048, sequence budget 256, generated
by the workload generator from the spec below (seed 15). The ``vllm``
policy, validation on, the decision log on, the metric events streamed to
disk, the cost model ``linear:8,0.02,0.1`` (8 ms per iteration plus 0.02 ms
per prompt row and 0.1 ms per decode row: about 80 live requests and a pool
near its limit, so requests are preempted). Each size runs in a fresh
process, so peak RSS (``resource.getrusage``) is that run's.

Measured: wall seconds of the run (engine loop, observers, decision log and
event stream; generating the workload is timed apart), the CPU seconds of the
same span (``cpu_s``: this process and its follower; steadier than wall
time on a shared machine, for A/B runs; ``cpu_run_s`` and ``cpu_follower_s``
split it, so the slower of the two processes shows), simulated requests per wall second
and the peak resident memory of the process (``peak_rss_mib``) and of its
follower (``peak_rss_log_process_mib``; the two together bound the run's).
The decision log and the events are written by a second process that follows
the run's decisions, as ``iterserve simulate`` does by default on two CPUs
(``sim/follower.py``); ``--serial-log`` writes them in the run's process. ``--rate-per-s`` raises the arrival rate
above the issue's 20 req/s: the pool serves about the same number of
requests per second, so the waiting queue grows faster and a few thousand
requests reach the queue lengths of a 100,000-request run (the per-decision
cost that grows with the waiting queue, measured in minutes, not hours).

    .venv/bin/python benchmarks/bench_sim_scale.py                    # 10,000 and 100,000
    .venv/bin/python benchmarks/bench_sim_scale.py --sizes 1000 10000 100000
    .venv/bin/python benchmarks/bench_sim_scale.py --sizes 2000 --repeat 3
    .venv/bin/python benchmarks/bench_sim_scale.py --one 10000 --serial-log   # log in process
    .venv/bin/python benchmarks/bench_sim_scale.py --sizes 2000 --profile 40
    .venv/bin/python benchmarks/bench_sim_scale.py --json out.json
    .venv/bin/python benchmarks/bench_sim_scale.py --one 3000 --rate-per-s 200   # one JSON line
    .venv/bin/python benchmarks/bench_sim_scale.py --sizes 100000 --timeline 20000  # us per step as the queue grows
    .venv/bin/python benchmarks/bench_sim_scale.py --cli --sizes 1000 3000 10000
    .venv/bin/python benchmarks/bench_sim_scale.py --cli --spec steady overload   # both, with growth

``--cli`` measures the whole ``iterserve simulate`` command instead (the run,
report.json, report.md and the four plots; the decision log on unless
``--no-decision-log``): wall seconds and the child's peak RSS. ``--phases``
(with ``--cli``) splits its wall seconds: the interpreter's start-up and exit,
the command before the run (the workload's loading and checks), the run, the
report phase (the events scan and the run summary inside it) and what follows
(report.json), timed in the child around the functions in :data:`PHASES`:

    .venv/bin/python benchmarks/bench_sim_scale.py --cli --phases --sizes 20000 100000

``--budget N`` splits one size's CPU seconds by layer, each part in a fresh
process on the same workload: the whole run (the decision log in process);
the engine alone (no observer: no decision log, events, trace or ledger;
validation on); the engine with validation off; then the whole run's wall
time with the follower. It prints microseconds per iteration beside the 100-second
target's allowance (100 s over the 100,000-request run's 219,556
iterations: 455 us):

    .venv/bin/python benchmarks/bench_sim_scale.py --budget 2000
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from iterserve.admission.overload import make_gate
from iterserve.cli.simulate import STREAM_BUFFER_BYTES
from iterserve.cost import parse_cost_model
from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.lab.machine import cpu_model, interpreter
from iterserve.policies.registry import policy_for
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.state import SchedulerState
from iterserve.sim.collector import collector_held_back
from iterserve.sim.generators import generate_workload
from iterserve.sim.report import RunConfig, costed_executor, run_simulation
from iterserve.sim.workload_spec import parse_spec

COST_MODEL = "linear:8,0.02,0.1"
POLICY = "vllm"
TARGET_US_PER_ITERATION = 100e6 / 219_556  # 100 s over the 100,000-request run's iterations
RATE_PER_S = 20.0  # the arrival rate; --rate-per-s raises it (a longer waiting queue)
#: ``--spec``: the arrival rate and cost model of each named workload. ``steady``
#: offers about what the pool serves; ``overload`` the same arrivals with
#: iterations that cost more (5 ms, 0.05 ms per prompt row, 0.5 ms per decode
#: row): the pool serves about 8 req/s of the 20 offered, so the waiting
#: queue grows through the run (to about 60,000 at 100,000 requests), as in
#: any overload study
SPECS = {"steady": (RATE_PER_S, COST_MODEL), "overload": (RATE_PER_S, "linear:5,0.05,0.5")}
PROGRESS_EVERY_S = 10.0  # wall seconds between progress lines
#: ``--phases``: the functions of ``iterserve simulate`` timed in its process, by label (the
#: report phase holds the events scan and the run summary)
PHASES = {"run": "run_simulation", "report phase": "write_metric_outputs",
          "events scan": "scan_events", "run summary": "summarize_timelines"}


class LineProgress(EngineObserver):
    """One stderr line every ``PROGRESS_EVERY_S`` wall seconds: requests
    finished so far and the rate (stderr passes through the parent)."""

    def __init__(self, num_requests: int) -> None:
        self._num_requests = num_requests
        self._num_finished = 0
        self._started_s = self._last_s = time.perf_counter()

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        self._num_finished += len(successor.finished)  # each cut lists only its own
        now_s = time.perf_counter()
        if now_s - self._last_s >= PROGRESS_EVERY_S:
            self._last_s = now_s
            elapsed_s = now_s - self._started_s
            print(f"  {self._num_requests:,} requests: {self._num_finished:,} finished "
                  f"after {elapsed_s:.0f} s ({self._num_finished / elapsed_s:,.0f} req/s)",
                  file=sys.stderr, flush=True)


class StepTimeline(EngineObserver):
    """``--timeline STEPS``: one stderr line per ``STEPS`` engine steps with
    the microseconds a step took over them (wall, this process's CPU and,
    on Linux, the follower's, read from ``/proc``) and the queue lengths at
    the end: where the cost per step grows with the waiting queue."""

    def __init__(self, every: int) -> None:
        self._every = every
        self._num_steps = 0
        self._last = self._clocks()

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        self._num_steps += 1
        if self._num_steps % self._every:
            return
        clocks = self._clocks()
        wall, run, follower = (1e6 * (now - then) / self._every
                               for now, then in zip(clocks, self._last, strict=True))
        self._last = clocks
        follower_text = f"{follower:4.0f}" if clocks[2] >= 0 else " n/a"
        print(f"  step {self._num_steps:>8,}: us per step wall {wall:4.0f}, run {run:4.0f}, "
              f"follower {follower_text}; waiting {len(successor.waiting):,}, "
              f"running {len(successor.running)}", file=sys.stderr, flush=True)

    @staticmethod
    def _clocks() -> tuple[float, float, float]:
        return time.perf_counter(), time.process_time(), _children_cpu_s()


def _children_cpu_s() -> float:
    """CPU seconds of this process's live children (the follower), from
    ``/proc`` (-1 where there is none to read)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return -1.0
    parent, ticks = os.getpid(), os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone, or not ours to read
        if int(fields[1]) == parent:  # ppid; then utime and stime at 11 and 12
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def spec(num_requests: int, rate_per_s: float = RATE_PER_S) -> dict[str, Any]:
    return {
        "workload_id": f"scale-{num_requests}", "seed": 15, "num_requests": num_requests,
        "clock": "ms", "capacity": {"max_num_batched_tokens": 2048, "max_num_seqs": 256},
        "kv": {"num_kv_blocks": 4000, "block_size": 16},
        "arrival": {"process": "poisson", "rate_per_s": rate_per_s},
        "clients": [{"client_id": "c0",
                     "prompt_tokens": {"kind": "uniform", "min": 32, "max": 1024},
                     "output_tokens": {"kind": "uniform", "min": 16, "max": 400}}],
    }


def run_one(num_requests: int, decision_log: bool, profile_lines: int,
            rate_per_s: float = RATE_PER_S, log_process: bool = True,
            timeline_every: int = 0, cost_model: str = COST_MODEL) -> dict[str, Any]:
    """One run in this process; the figures as a dict."""
    started = time.perf_counter()
    manifest = generate_workload(parse_spec(spec(num_requests, rate_per_s)))
    generate_s = time.perf_counter() - started
    model = parse_cost_model(cost_model)
    config = RunConfig(policy_for(POLICY, manifest.online, cost_model=model), model,
                       make_gate("accept-all", {}))
    profiler = cProfile.Profile() if profile_lines else None
    with tempfile.TemporaryDirectory() as tmp:
        log_path, events_path = Path(tmp) / "decisions.jsonl", Path(tmp) / "events.jsonl"
        with (log_path.open("w", buffering=STREAM_BUFFER_BYTES) as log,  # as the command's
              events_path.open("w", buffering=STREAM_BUFFER_BYTES) as events):
            started, cpu_started = time.perf_counter(), _cpu_s()
            if profiler is not None:
                profiler.enable()
            observers: list[EngineObserver] = [LineProgress(num_requests)]
            if timeline_every:
                observers.append(StepTimeline(timeline_every))
            run = run_simulation(manifest, config, log if decision_log else None,
                                 observers, events=events,
                                 log_process=log_process and not profiler)
            if profiler is not None:
                profiler.disable()
            wall_s = time.perf_counter() - started
            cpu_run_s, cpu_follower_s = (after - before for after, before in zip(
                _cpu_s(), cpu_started, strict=True))
        sizes = {"decision_log_bytes": log_path.stat().st_size,
                 "events_bytes": events_path.stat().st_size}
    if profiler is not None:
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(profile_lines)
    final = run.engine.state
    return {
        "num_requests": num_requests, "policy": POLICY, "cost_model": cost_model,
        "decision_log": decision_log, "validation": run.engine.validate,
        "iterations": run.engine.num_iterations, "num_live_at_end": final.num_live,
        "generate_s": round(generate_s, 3), "wall_s": round(wall_s, 3),
        "cpu_s": round(cpu_run_s + cpu_follower_s, 3), "cpu_run_s": round(cpu_run_s, 3),
        "cpu_follower_s": round(cpu_follower_s, 3), "rate_per_s": rate_per_s,
        "requests_per_wall_s": round(num_requests / wall_s, 1),
        "log_process": log_process and decision_log and not profiler,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "peak_rss_log_process_mib": round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
        **sizes, "python": interpreter(),
    }


def _cpu_s() -> tuple[float, float]:
    """CPU seconds of this process, and of its reaped children (the follower)."""
    times = os.times()
    return times.user + times.system, times.children_user + times.children_system


def run_engine_alone(num_requests: int, validate: bool, rate_per_s: float = RATE_PER_S,
                     cost_model: str = COST_MODEL) -> dict[str, Any]:
    """The engine loop with no observer at all (``--budget``): its CPU seconds."""
    manifest = generate_workload(parse_spec(spec(num_requests, rate_per_s)))
    model = parse_cost_model(cost_model)
    policy = policy_for(POLICY, manifest.online, cost_model=model)
    engine = Engine(manifest.online, policy, costed_executor(manifest, model), [],
                    validate=validate)
    cpu_started_s = time.process_time()
    with collector_held_back():
        engine.run()
    return {"num_requests": num_requests, "validation": validate, "observers": False,
            "iterations": engine.num_iterations,
            "cpu_s": round(time.process_time() - cpu_started_s, 3)}


BUDGET_PARTS = {"whole run": ["--serial-log"],
                "engine alone, validation on": ["--engine-alone"],
                "engine alone, validation off": ["--engine-alone", "--no-validation"],
                "whole run, follower": []}


def print_budget(num_requests: int, rate_per_s: float) -> None:
    """``--budget``: each part in a fresh process, then the split."""
    cpu, runs = {}, {}
    for name, flags in BUDGET_PARTS.items():
        command = [sys.executable, __file__, "--one", str(num_requests),
                   "--rate-per-s", str(rate_per_s), *flags]
        runs[name] = json.loads(subprocess.run(command, check=True, stdout=subprocess.PIPE,
                                               text=True).stdout)
        cpu[name] = (runs[name]["cpu_s"], runs[name]["iterations"])
    whole_s, alone_s, bare_s, _ = (cpu[name][0] for name in BUDGET_PARTS)
    iterations = cpu["whole run"][1]
    print(f"{num_requests:,} requests, {iterations:,} iterations; the 100 s target allows "
          f"{TARGET_US_PER_ITERATION:.0f} us per iteration")
    print("| part | cpu s | us per iteration |")
    print("|---|---:|---:|")
    for name, seconds in (("policy, simulated executor, transition", bare_s),
                          ("validation", alone_s - bare_s),
                          ("observers (decision log, events, trace, ledger)", whole_s - alone_s),
                          ("whole run", whole_s)):
        print(f"| {name} | {seconds:.2f} | {seconds / iterations * 1e6:.0f} |")
    forked = runs["whole run, follower"]
    print(f"With the follower (the decision log and the events from a second process): "
          f"{forked['wall_s'] / iterations * 1e6:.0f} us per iteration of wall time "
          f"({forked['wall_s']:.2f} s; both processes' CPU {forked['cpu_s']:.2f} s; the run "
          f"alone in its process: {runs['whole run']['wall_s']:.2f} s)")


def run_cli(num_requests: int, decision_log: bool, rate_per_s: float = RATE_PER_S,
            phases: bool = False, cost_model: str = COST_MODEL) -> dict[str, Any]:
    """The whole ``iterserve simulate`` command (run, report, plots) in a
    child process: its wall seconds and its peak RSS (``RUSAGE_CHILDREN``:
    this process waits for that one child only); with ``phases``, the
    child is this script timing :data:`PHASES` (:func:`time_phases`)."""
    with tempfile.TemporaryDirectory() as tmp:
        workload = Path(tmp) / "workload.json"
        (Path(tmp) / "spec.json").write_text(json.dumps(spec(num_requests, rate_per_s)))
        iterserve = [sys.executable, "-m", "iterserve.cli.main"]
        subprocess.run([*iterserve, "workload", "gen", str(Path(tmp) / "spec.json"),
                        "-o", str(workload)], check=True, stdout=subprocess.DEVNULL)
        arguments = ["--workload", str(workload), "--policy", POLICY,
                     "--cost-model", cost_model, "--out", str(Path(tmp) / "out")]
        if decision_log:
            arguments += ["--decision-log", str(Path(tmp) / "decisions.jsonl")]
        phases_path = Path(tmp) / "phases.json"
        command = ([sys.executable, __file__, "--phases-of", str(phases_path), "--", *arguments]
                   if phases else [*iterserve, "simulate", *arguments])
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        wall_s = time.perf_counter() - started
        events_bytes = (Path(tmp) / "out" / "events.jsonl").stat().st_size
        log_path = Path(tmp) / "decisions.jsonl"
        log_bytes = log_path.stat().st_size if log_path.exists() else 0
        iterations = json.loads((Path(tmp) / "out" / "report.json").read_text())["iterations"]
        split = json.loads(phases_path.read_text()) if phases else None
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    row = {"num_requests": num_requests, "policy": POLICY, "cost_model": cost_model,
           "mode": "cli", "decision_log": decision_log, "plots": True, "iterations": iterations,
           "wall_s": round(wall_s, 3), "requests_per_wall_s": round(num_requests / wall_s, 1),
           "peak_rss_mib": round(peak_kib / 1024, 1), "events_bytes": events_bytes,
           "decision_log_bytes": log_bytes, "rate_per_s": rate_per_s,
           "python": interpreter()}
    if split is not None:
        row["phases_s"] = {"start-up and exit": round(wall_s - split.pop("command"), 3),
                           **{label: round(seconds, 3) for label, seconds in split.items()}}
    return row


def time_phases(arguments: list[str], out: Path) -> int:
    """``iterserve simulate ARGUMENTS`` in this process with a timer around
    each function of :data:`PHASES` (in every module that calls it by that
    name); writes the seconds of each, the command's in all, the time before
    the run and the time after the report phase to ``out`` as JSON."""
    import iterserve.cli.simulate as simulate_cli
    import iterserve.sim.report as sim_report
    from iterserve.cli.main import main as iterserve_main

    spans: dict[str, list[float]] = {}  # label -> [first start, last end, seconds in all]

    def timer(label: str, function: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                ended = time.perf_counter()
                span = spans.setdefault(label, [started, ended, 0.0])
                span[1], span[2] = ended, span[2] + ended - started
        return timed

    for label, name in PHASES.items():
        function = getattr(sim_report, name)
        for module in (sim_report, simulate_cli):
            if getattr(module, name, None) is function:
                setattr(module, name, timer(label, function))
    started = time.perf_counter()
    status = iterserve_main(["simulate", *arguments])
    ended = time.perf_counter()
    seconds = {"command": ended - started}
    if "run" in spans and "report phase" in spans:
        seconds["before the run"] = spans["run"][0] - started
        seconds.update({label: spans[label][2] for label in PHASES if label in spans})
        seconds["after the report phase"] = ended - spans["report phase"][1]
    out.write_text(json.dumps(seconds))
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=1, help="runs per size (best wall kept)")
    parser.add_argument("--no-decision-log", action="store_true")
    parser.add_argument("--serial-log", action="store_true",
                        help="write the decision log and the events in the run's process (no follower)")
    parser.add_argument("--profile", type=int, default=0, metavar="LINES",
                        help="cProfile the run, print the top LINES by own time (one size)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--rate-per-s", type=float, default=RATE_PER_S,
                        help="Poisson arrival rate (above 20 the waiting queue grows faster)")
    parser.add_argument("--cost-model", default=COST_MODEL,
                        help=f"the simulated iteration cost (default {COST_MODEL})")
    parser.add_argument("--spec", nargs="+", choices=sorted(SPECS), default=None,
                        help="named workloads to run each size under (steady: about what the "
                             "pool serves; overload: about 2.4 times that); overrides "
                             "--rate-per-s and --cost-model")
    parser.add_argument("--cli", action="store_true",
                        help="measure the whole `iterserve simulate` command (report and "
                             "plots included) in a child process")
    parser.add_argument("--phases", action="store_true",
                        help="with --cli: split the command's wall seconds into its phases")
    parser.add_argument("--budget", type=int, default=None, metavar="N",
                        help="split N requests' CPU seconds by layer (fresh process each)")
    parser.add_argument("--timeline", type=int, default=0, metavar="STEPS",
                        help="with one size: a line per STEPS engine steps, the us a step "
                             "took in each process and the queue lengths")
    parser.add_argument("--python", nargs="+", default=[sys.executable], metavar="PYTHON",
                        help="interpreters to run each size under, alternated within each "
                             "repeat (each needs iterserve installed; default: this one)")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--phases-of", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("simulate_arguments", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--engine-alone", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-validation", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for python in args.python:
        if shutil.which(python) is None:
            parser.error(f"--python {python}: not an executable")
    if args.phases_of is not None:  # the child of --cli --phases
        return time_phases(args.simulate_arguments, args.phases_of)
    if args.phases and not args.cli:
        parser.error("--phases needs --cli")
    if args.budget is not None:
        print_budget(args.budget, args.rate_per_s)
        return 0
    if args.one is not None and args.engine_alone:
        print(json.dumps(run_engine_alone(args.one, not args.no_validation, args.rate_per_s,
                                          args.cost_model)))
        return 0
    if args.one is not None and args.cli:
        print(json.dumps(run_cli(args.one, not args.no_decision_log, args.rate_per_s,
                                 args.phases, args.cost_model)))
        return 0
    if args.one is not None or args.profile or args.timeline:
        size = args.one if args.one is not None else args.sizes[0]
        print(json.dumps(run_one(size, not args.no_decision_log, args.profile, args.rate_per_s,
                                 not args.serial_log, args.timeline, args.cost_model)))
        return 0
    specs = ({name: SPECS[name] for name in args.spec} if args.spec
             else {f"{args.rate_per_s:g} req/s": (args.rate_per_s, args.cost_model)})
    rows = []
    for name, (rate, cost_model) in specs.items():
        args.rate_per_s, args.cost_model = rate, cost_model
        rows += [{**row, "spec": name} for size in args.sizes for row in best_of(size, args)]
    print(f"CPU: {cpu_model()}", file=sys.stderr)
    print("| spec | requests | iterations | wall s | simulated req / wall s | peak RSS MiB | "
          "decision log MiB | python |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        print(f"| {row['spec']} | {row['num_requests']:,} | {row['iterations']:,} | "
              f"{row['wall_s']:.1f} | {row['requests_per_wall_s']:,.0f} | "
              f"{row['peak_rss_mib']:,.0f} | {row.get('decision_log_bytes', 0) / 2**20:,.0f} | "
              f"{row['python']} |")
    print_growth(rows)
    if args.phases:
        print_phases(rows)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


def print_growth(rows: list[dict[str, Any]]) -> None:
    """Per spec and interpreter: wall seconds of the largest size over the
    smallest's, against the ratio of their sizes (linear growth: equal)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["spec"], str(row["python"])), []).append(row)
    for (spec_name, _), group in groups.items():
        if len(group) < 2:
            continue
        small = min(group, key=lambda row: row["num_requests"])
        large = max(group, key=lambda row: row["num_requests"])
        print(f"growth, {spec_name}: {small['num_requests']:,} -> {large['num_requests']:,} "
              f"requests ({large['num_requests'] / small['num_requests']:.0f}x): wall "
              f"{large['wall_s'] / small['wall_s']:.1f}x")


def print_phases(rows: list[dict[str, Any]]) -> None:
    """The ``--phases`` table: each phase's wall seconds (the fastest run's)."""
    labels = list(rows[0]["phases_s"])
    print()
    print("| requests | " + " | ".join(labels) + " |")
    print("|---:|" + "---:|" * len(labels))
    for row in rows:
        print(f"| {row['num_requests']:,} | "
              + " | ".join(f"{row['phases_s'][label]:.2f}" for label in labels) + " |")


def best_of(size: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The fastest of ``--repeat`` fresh processes for each interpreter of
    ``--python`` (peak RSS: the largest seen), the interpreters alternated
    within each repeat so that a host's drift falls on all of them alike."""
    options = ["--one", str(size), "--rate-per-s", str(args.rate_per_s),
               "--cost-model", args.cost_model]
    for flag in ("no_decision_log", "serial_log", "cli", "phases"):
        if getattr(args, flag):
            options.append("--" + flag.replace("_", "-"))
    runs: dict[str, list[dict[str, Any]]] = {python: [] for python in args.python}
    for attempt in range(args.repeat):
        for python in args.python:
            print(f"{size:,} requests, run {attempt + 1} of {args.repeat}, {python} ...",
                  file=sys.stderr, flush=True)
            out = subprocess.run([python, __file__, *options], check=True,
                                 stdout=subprocess.PIPE, text=True).stdout
            runs[python].append(json.loads(out))
            last = runs[python][-1]
            print(f"  {last['wall_s']:.1f} s, {last['requests_per_wall_s']:,.0f} req/s, "
                  f"peak RSS {last['peak_rss_mib']:,.0f} MiB", file=sys.stderr, flush=True)
    rows = []
    for python_runs in runs.values():
        best = min(python_runs, key=lambda run: run["wall_s"])
        rows.append({**best, "peak_rss_mib": max(run["peak_rss_mib"] for run in python_runs),
                     "wall_s_all": [run["wall_s"] for run in python_runs]})
    return rows


if __name__ == "__main__":
    sys.exit(main())
