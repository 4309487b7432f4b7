"""``iterserve sweep``: goodput capacity over offered rates (0x07, DistServe).

    G* = max { lambda : Pr_lambda[request SLO-valid] >= alpha }

For every policy, offered rate lambda (requests/s) and trial, the workload's
requests keep their prompt, output cap and hidden lengths and get new
Poisson arrival times: trial t draws unit-rate exponential gaps from
``random.Random(f"{seed}/{t}")`` and divides them by lambda, so every rate
and policy sees the same random numbers (common random numbers). Each trial
runs to completion and is evaluated over [first arrival, last event], so
every offered request is resolved; its offered-load attainment is
N_valid / N_off. A rate qualifies when the MEAN of its trials' offered-load
attainments is >= alpha (each trial offers every request, so this equals the
pooled N_valid / N_off); the capacity is the highest qualifying tested rate
(null when none). This is a synthetic-model estimate: no warmup, the named
(uncalibrated) cost model, one workload distribution.

A rate is only evidence of capacity when the run offered it: the observed
offered rate is N_off over the evaluation window (first arrival to last
event). When its mean over trials falls below ``MIN_OFFERED_FRACTION`` of the
nominal rate (the run is mostly drain: a rate well past what the policy
serves, whose queue drains long after the last arrival, or a workload too
small for the rate),
the rate is marked ``offered_rate_sustained: false``, cannot be the capacity,
and the sweep warns on stderr and in sweep.json ``warnings``.

Trials run on local processes (``--workers``, default ``os.cpu_count()``),
or on a Ray cluster with ``--ray ADDRESS`` (the optional ``ray`` extra,
imported only then; :mod:`iterserve.cli.sweep_ray`): the same jobs, the same
results for the same seeds.
Outputs: DIR/sweep.json and DIR/attainment_vs_rate.png.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

from rich.console import Console
from rich.progress import Progress

from iterserve.cli.flag_types import SEED, finite_float, int_at_least, output_dir
from iterserve.cli.simulate import FlagError, RunFlags, RunSetup, add_run_flags, setup_from_flags
from iterserve.cost import seconds_per_clock_unit
from iterserve.metrics.event_scan import scan_events
from iterserve.metrics.plots import plot_sweep
from iterserve.metrics.report import evaluate_timelines
from iterserve.policies.registry import bind_fairness, policy_for
from iterserve.policies.settings import add_policy_setting_flag
from iterserve.records.limits import MAX_ARRIVAL
from iterserve.records.spec import WorkloadManifest
from iterserve.sim.arrivals import poisson_gap_s
from iterserve.sim.report import RunConfig, run_simulation

SCHEMA = "iterserve.sweep/v1"
MAX_TRIALS = 10_000
MAX_WORKERS = 1024
MIN_OFFERED_FRACTION = 0.5
MAX_RATE_PER_S = 1e6  # an offered rate no serving engine is swept at
CAPACITY_RULE = ("highest tested rate whose mean over trials of offered-load attainment "
                 "(N_valid / N_off, every request resolved) is >= alpha and whose mean observed "
                 f"offered rate is >= {MIN_OFFERED_FRACTION} x the nominal rate")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sweep", help="find the highest arrival rate at which each policy still meets its "
                      "latency targets (goodput capacity)",
        description="Re-time the workload's requests as Poisson arrivals at each --rates value, "
                    "run every policy at every rate for --trials seeds, and report the share "
                    "of requests within their latency targets (offered-load attainment) and "
                    "the highest rate where it is at least --alpha (goodput capacity). Writes "
                    "sweep.json and attainment_vs_rate.png to --out.")
    add_run_flags(parser)
    parser.add_argument("--policy", nargs="+", required=True,
                        help="policy names to compare (see `iterserve policies`)")
    add_policy_setting_flag(parser)
    parser.add_argument("--rates", type=finite_float(0.0, MAX_RATE_PER_S, exclusive_min=True),
                        nargs="+", required=True,
                        help=f"arrival rates to try, requests per second (offered rates; at "
                             f"most {MAX_RATE_PER_S:g})")
    parser.add_argument("--alpha", type=finite_float(), default=0.9,
                        help="share of requests that must meet their latency targets for a "
                             "rate to count (required attainment; default 0.9)")
    parser.add_argument("--trials", type=int_at_least(-MAX_TRIALS, MAX_TRIALS), default=3,
                        help=f"runs per rate, each with its own arrival times (seeded "
                             f"trials; at most {MAX_TRIALS})")
    parser.add_argument("--seed", type=SEED, default=0,
                        help="base seed of the arrival times (trial t uses SEED/t)")
    parser.add_argument("--workers", type=int_at_least(-MAX_WORKERS, MAX_WORKERS), default=None,
                        help="worker processes (default: os.cpu_count())")
    parser.add_argument("--ray", metavar="ADDRESS", default=None,
                        help="run the trials on the Ray cluster at ADDRESS (HOST:PORT or auto; "
                             "needs pip install 'iterserve[ray]')")
    parser.add_argument("--out", type=output_dir, required=True, help="output directory")
    parser.set_defaults(run=run)


@dataclass(frozen=True, slots=True)
class TrialJob:
    setup: RunSetup  # parsed once, pickled to the workers
    policy: str
    rate_per_s: float
    trial: int
    seed: int
    settings: tuple[tuple[str, Any], ...] = ()  # --policy-setting, for every policy that takes it

    @property
    def trial_seed(self) -> str:
        return f"{self.seed}/{self.trial}"


@dataclass(frozen=True, slots=True)
class TrialResult:
    job: TrialJob
    offered_load: float | None
    completion_conditioned: float | None
    num_offered: int
    num_rejected: int
    observed_offered_rate_per_s: float


def poisson_arrivals(manifest: WorkloadManifest, rate_per_s: float, trial_seed: str,
                     seconds_per_unit: float) -> WorkloadManifest:
    """The workload with Poisson arrivals at ``rate_per_s``, in file order
    (:func:`arrival_units`)."""
    online = manifest.online
    arrivals = arrival_units(len(online.requests), rate_per_s, trial_seed, seconds_per_unit,
                             online.clock)
    requests = tuple(dataclasses.replace(spec, arrival=arrival)
                     for spec, arrival in zip(online.requests, arrivals, strict=True))
    return WorkloadManifest(dataclasses.replace(online, requests=requests), manifest.hidden)


def arrival_units(num_requests: int, rate_per_s: float, trial_seed: str,
                  seconds_per_unit: float, clock: str) -> list[float]:
    """``num_requests`` Poisson arrival times at ``rate_per_s`` on the run's
    clock: unit exponential gaps from ``random.Random(trial_seed)`` over the
    rate. A :class:`FlagError` where they pass the workload limit on arrival
    times (``MAX_ARRIVAL`` clock units: a rate far too low)."""
    rng = random.Random(trial_seed)
    now_s = 0.0
    arrivals = []
    for _ in range(num_requests):
        now_s += poisson_gap_s(rng, rate_per_s)
        arrivals.append(now_s / seconds_per_unit)
    if arrivals and arrivals[-1] > MAX_ARRIVAL:
        raise FlagError(f"--rates {rate_per_s:g}: {num_requests} arrivals at this rate reach "
                        f"{arrivals[-1]:.3g} on the {clock} clock, past the "
                        f"workload limit {MAX_ARRIVAL:g}")
    return arrivals


def run_trial(job: TrialJob) -> TrialResult:
    """One simulated run at one rate; a top-level function for the pool."""
    setup = job.setup
    assert setup.slo is not None, "checked before the sweep starts"
    seconds = seconds_per_clock_unit(setup.manifest.online.clock, setup.cost_model)
    manifest = poisson_arrivals(setup.manifest, job.rate_per_s, job.trial_seed, seconds)
    policy = bind_fairness(policy_for(job.policy, manifest.online, dict(job.settings),
                                      strict=False, cost_model=setup.cost_model),
                           manifest.online.fairness)
    with tempfile.TemporaryDirectory(prefix="iterserve-trial-") as tmp:
        events_path = Path(tmp) / "events.jsonl"
        with events_path.open("w", encoding="utf-8") as events:  # to disk, not to memory
            run_simulation(manifest, RunConfig(policy, setup.cost_model, setup.gate),
                           events=events)
        scan = scan_events(events_path)
    report = evaluate_timelines(scan.timelines, setup.slo, scan.default_window(),
                                label=job.policy)
    return TrialResult(job, report.attainment.offered_load,
                       report.attainment.completion_conditioned, report.outcomes.num_offered,
                       report.outcomes.num_rejected, report.rates.offered_rate_per_s)


def completed_trials(jobs: Sequence[TrialJob], pool: Executor | None) -> Iterator[TrialResult]:
    """Results as they complete: on ``pool``, or lazily in this process when
    None. Jobs go to the pool now, before the caller awaits anything, so the
    pool forks its workers before any progress-display thread exists."""
    if pool is None:
        return map(run_trial, jobs)
    futures = [pool.submit(run_trial, job) for job in jobs]
    return (future.result() for future in as_completed(futures))


def _trials(jobs: Sequence[TrialJob], workers: int, ray_address: str | None,
            stack: contextlib.ExitStack) -> tuple[Iterator[TrialResult], str]:
    """The results and where they run: the Ray cluster at ``ray_address``,
    else local processes (this one when ``workers`` is 1)."""
    if ray_address is not None:
        from iterserve.cli.sweep_ray import RayUnavailable, ray_trials

        try:
            trials = ray_trials(jobs, ray_address)
        except RayUnavailable as error:
            raise FlagError(str(error)) from None
        stack.callback(trials.close)
        return trials, f"the Ray cluster at {ray_address}"
    pool = None if workers == 1 else stack.enter_context(ProcessPoolExecutor(workers))
    return completed_trials(jobs, pool), f"{workers} processes"


def summarize_policy(results: Iterable[TrialResult], alpha: float) -> dict[str, Any]:
    by_rate: dict[float, list[TrialResult]] = {}
    for result in sorted(results, key=lambda r: (r.job.rate_per_s, r.job.trial)):
        by_rate.setdefault(result.job.rate_per_s, []).append(result)
    rates = [_rate_entry(rate, trials, alpha) for rate, trials in by_rate.items()]
    qualifying = [entry["rate_per_s"] for entry in rates
                  if entry["meets_alpha"] and entry["offered_rate_sustained"]]
    return {"capacity_rate_per_s": max(qualifying) if qualifying else None, "rates": rates}


def offered_rate_warnings(policies: dict[str, dict[str, Any]]) -> list[str]:
    """One line per (policy, rate) whose observed offered rate fell well
    below the nominal rate."""
    warnings = []
    for name, summary in policies.items():
        for entry in summary["rates"]:
            if not entry["offered_rate_sustained"]:
                warnings.append(
                    f"{name} at {entry['rate_per_s']:g} req/s: observed offered rate "
                    f"{entry['mean_observed_offered_rate_per_s']:.4g} req/s is below "
                    f"{MIN_OFFERED_FRACTION:g} x nominal (the run is mostly drain: the rate is "
                    f"well past what the policy serves, or the workload is too small for it; "
                    f"not counted as capacity)")
    return warnings


def _rate_entry(rate: float, trials: list[TrialResult], alpha: float) -> dict[str, Any]:
    attained = [r.offered_load if r.offered_load is not None else 0.0 for r in trials]
    conditioned = [r.completion_conditioned for r in trials if r.completion_conditioned is not None]
    mean = fmean(attained)
    observed = fmean(r.observed_offered_rate_per_s for r in trials)
    return {
        "rate_per_s": rate,
        "offered_load_attainment": attained,
        "mean_offered_load_attainment": mean,
        "meets_alpha": mean >= alpha,
        "completion_conditioned_mean": fmean(conditioned) if conditioned else None,
        "completion_conditioned_label": "diagnostic: conditioned on completion",
        "num_offered": [r.num_offered for r in trials],
        "num_rejected": [r.num_rejected for r in trials],
        "observed_offered_rate_per_s": [r.observed_offered_rate_per_s for r in trials],
        "mean_observed_offered_rate_per_s": observed,
        "offered_rate_sustained": observed >= MIN_OFFERED_FRACTION * rate,
    }


def _check(args: argparse.Namespace, setup: RunSetup) -> None:
    if setup.slo is None:
        raise FlagError("sweep needs an SLO: the workload's slo or --slo-ttft-ms/--slo-tbt-ms")
    if not 0.0 < args.alpha <= 1.0:
        raise FlagError(f"--alpha must be in (0, 1], got {args.alpha}")
    if args.trials < 1:
        raise FlagError(f"--trials must be >= 1, got {args.trials}")
    if args.workers is not None and args.workers < 1:
        raise FlagError(f"--workers must be >= 1, got {args.workers}")
    if args.ray is not None and not args.ray.strip():
        raise FlagError("--ray needs an address: HOST:PORT or auto")
    if args.ray is not None and args.workers is not None:
        raise FlagError("--workers applies to local processes; a Ray cluster places the trials")
    _check_arrival_span(args, setup)
    settings = dict(args.policy_setting)
    for name in args.policy:  # a bad name or setting fails before any work starts
        policy_for(name, setup.manifest.online, settings, strict=False,
                   cost_model=setup.cost_model)


def _check_arrival_span(args: argparse.Namespace, setup: RunSetup) -> None:
    """:func:`arrival_units`' limit on arrival times, before any trial
    starts: each trial's unit gaps sum to the same total at every rate (the
    arrivals are that sum over the rate), so the lowest rate's last arrival
    per trial is the one to check."""
    online = setup.manifest.online
    seconds = seconds_per_clock_unit(online.clock, setup.cost_model)
    for trial in range(args.trials):
        arrival_units(len(online.requests), min(args.rates), f"{args.seed}/{trial}", seconds,
                      online.clock)


def run(args: argparse.Namespace) -> int:
    setup = setup_from_flags(RunFlags.from_args(args))
    _check(args, setup)
    settings = tuple(dict(args.policy_setting).items())
    jobs = [TrialJob(setup, policy, rate, trial, args.seed, settings)
            for policy in args.policy for rate in args.rates for trial in range(args.trials)]
    workers = min(args.workers or os.cpu_count() or 1, len(jobs))
    results: list[TrialResult] = []
    with contextlib.ExitStack() as stack:
        trials, where = _trials(jobs, workers, args.ray, stack)
        progress = stack.enter_context(Progress(console=Console(stderr=True)))
        task = progress.add_task(f"sweep: {len(jobs)} runs on {where}", total=len(jobs))
        for result in trials:
            results.append(result)
            progress.advance(task)
    policies = {name: summarize_policy([r for r in results if r.job.policy == name], args.alpha)
                for name in args.policy}
    warnings = offered_rate_warnings(policies)
    args.out.mkdir(parents=True, exist_ok=True)
    document = {
        "schema": SCHEMA, "workload": str(args.workload),
        "workload_id": setup.manifest.online.workload_id, "alpha": args.alpha,
        "trials": args.trials, "seed": args.seed,
        "trial_seeds": [f"{args.seed}/{trial}" for trial in range(args.trials)],
        "arrivals": "Poisson; unit exponential gaps from random.Random(trial_seed) / rate",
        "cost_model": setup.cost_model.spec, "overload": {"contract": setup.gate.gate_id,
                                                          "params": setup.gate.params()},
        "slo": setup.slo.to_dict() if setup.slo else None, "capacity_rule": CAPACITY_RULE,
        "policies": policies, "warnings": warnings,
    }
    (args.out / "sweep.json").write_text(json.dumps(document, indent=2) + "\n")
    plot_sweep(policies, args.alpha, args.out / "attainment_vs_rate.png")
    for warning in warnings:
        print(f"iterserve sweep: warning: {warning}", file=sys.stderr)
    for name, summary in policies.items():
        print(f"{name}: goodput capacity {summary['capacity_rate_per_s']} req/s "
              f"(alpha {args.alpha}, {args.trials} trials) -> {args.out / 'sweep.json'}")
    return 0
