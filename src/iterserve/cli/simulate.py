"""``iterserve simulate``: run a workload file on the simulated executor.

Writes DIR/report.json (slot occupancy, per-request cuts, chunk ledger, and
``metrics`` (0x07) when an SLO is declared), DIR/events.jsonl, DIR/report.md
and PNG plots. See docs/metrics.md section 7.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iterserve.admission.overload import OverloadGate, make_gate
from iterserve.cli.progress import RunProgress
from iterserve.metrics import ObservationWindow, SloConfig
from iterserve.metrics.capacity import token_budget_utilisation
from iterserve.plan import Policy
from iterserve.policies.registry import bind_fairness, policy_for
from iterserve.policies.settings import add_policy_setting_flag, parse_settings
from iterserve.records.spec import FairnessSpec, OnlineWorkload, WorkloadManifest
from iterserve.sim.admission_report import admission_report
from iterserve.sim.cost import (
    NamedCostModel,
    default_cost_model,
    parse_cost_model,
    seconds_per_clock_unit,
)
from iterserve.sim.fairness_bound import vtc_bound_report
from iterserve.sim.kv_report import kv_report
from iterserve.sim.report import (
    BoundOf,
    RunConfig,
    SimulationRun,
    resolve_slo,
    run_simulation,
    simulate_report,
    with_default_slo,
    write_metric_outputs,
)
from iterserve.sim.workload import load_workload


class FlagError(ValueError):
    """A command-line flag is malformed or does not fit the workload."""


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """Flags shared by ``simulate`` and ``sweep``."""
    parser.add_argument("--workload", type=Path, required=True, help="workload JSON file")
    parser.add_argument("--cost-model", metavar="NAME[:params]",
                        help="iteration cost: fixed:MS or linear:BASE_MS,PREFILL_ROW_MS,"
                             "DECODE_ROW_MS (default: 1 s per iteration on the iteration "
                             "clock, 1 ms on the ms clock)")
    parser.add_argument("--overload", default="accept-all",
                        help="overload contract: accept-all, bounded, slo-feasible")
    parser.add_argument("--max-live", type=int, default=None,
                        help="live-request cap for --overload bounded")
    parser.add_argument("--slo-ttft-ms", type=float, default=None,
                        help="TTFT limit (default: the workload's per-request slo)")
    parser.add_argument("--slo-tbt-ms", type=float, default=None,
                        help="TBT limit (default: the workload's per-request slo)")
    parser.add_argument("--prompt-weight", type=float, default=None,
                        help="service weight w_p per completed prompt row (default: the "
                             "workload's fairness section, else 1)")
    parser.add_argument("--output-weight", type=float, default=None,
                        help="service weight w_q per completed output (default: the "
                             "workload's fairness section, else 1)")
    parser.add_argument("--client-weight", action="append", default=None, metavar="CLIENT=W",
                        help="a client's share weight (repeatable; default 1)")
    parser.add_argument("--starvation-horizon", type=float, default=None, metavar="H",
                        help="starvation guard (F63): a client active and unserved for H clock "
                             "units (iterations or ms) gets its oldest request's next interval "
                             "forced into the plan (default: the workload's, else off)")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("simulate", help="run a workload on the simulated executor")
    add_run_flags(parser)
    parser.add_argument("--policy", required=True, help="policy name (see `iterserve policies`)")
    add_policy_setting_flag(parser)
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--decision-log", type=Path, help="write the JSONL decision log here")
    parser.add_argument("--max-iterations", type=int, default=None)
    parser.add_argument("--window", type=float, nargs=2, metavar=("START_S", "END_S"),
                        help="observation window in seconds (default: first arrival to the "
                             "last event)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--bytes-per-row", type=int, default=None,
                        help="logical KV bytes per row for the 0x09 exposure proxy")
    parser.add_argument("--fairness-horizon", type=float, default=None, metavar="H",
                        help="F63 observation horizon in clock units: a client eligible for H "
                             "without a completed event counts as starved (default: the "
                             "observation window)")
    parser.set_defaults(run=run)


@dataclass(frozen=True, slots=True)
class RunFlags:
    """The flags :func:`add_run_flags` declares, as a picklable value."""

    workload: Path
    cost_model: str | None = None
    overload: str = "accept-all"
    max_live: int | None = None
    slo_ttft_ms: float | None = None
    slo_tbt_ms: float | None = None
    prompt_weight: float | None = None
    output_weight: float | None = None
    client_weights: tuple[str, ...] = ()
    starvation_horizon: float | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunFlags:
        return cls(args.workload, args.cost_model, args.overload, args.max_live,
                   args.slo_ttft_ms, args.slo_tbt_ms, args.prompt_weight, args.output_weight,
                   tuple(args.client_weight or ()), args.starvation_horizon)


@dataclass(frozen=True, slots=True)
class RunSetup:
    """The run the flags describe: the workload (with the run SLO filled in),
    the SLO the evaluator judges, the cost model and the overload gate."""

    manifest: WorkloadManifest
    slo: SloConfig | None
    cost_model: NamedCostModel
    gate: OverloadGate


def setup_from_flags(flags: RunFlags) -> RunSetup:
    manifest = load_workload(flags.workload)
    online = manifest.online
    try:
        model = (default_cost_model(online.clock) if flags.cost_model is None
                 else parse_cost_model(flags.cost_model))
        seconds_per_clock_unit(online.clock, model)
        slo = resolve_slo(online, flags.slo_ttft_ms, flags.slo_tbt_ms)
    except ValueError as exc:
        raise FlagError(str(exc)) from None
    if slo is not None:
        online = with_default_slo(online, slo)
    online = dataclasses.replace(online, fairness=fairness_from_flags(flags, online.fairness))
    manifest = WorkloadManifest(online, manifest.hidden)
    return RunSetup(manifest, slo, model, gate_from_flags(flags, model, online.clock))


def fairness_from_flags(flags: RunFlags, declared: FairnessSpec | None) -> FairnessSpec | None:
    """The workload's ``fairness`` section with each given flag overriding it."""
    if (flags.prompt_weight is None and flags.output_weight is None
            and not flags.client_weights and flags.starvation_horizon is None):
        return declared
    base = declared or FairnessSpec()
    weights = dict(base.client_weights)
    for text in flags.client_weights:
        client, sep, value = text.partition("=")
        try:
            weights[client] = float(value)
        except ValueError:
            sep = ""
        if not sep or not client:
            raise FlagError(f"--client-weight: expected CLIENT=W, got {text!r}")
    try:
        return FairnessSpec(
            base.prompt_weight if flags.prompt_weight is None else flags.prompt_weight,
            base.output_weight if flags.output_weight is None else flags.output_weight,
            tuple(sorted(weights.items())),
            base.starvation_horizon if flags.starvation_horizon is None
            else flags.starvation_horizon)
    except ValueError as exc:
        raise FlagError(str(exc)) from None


def gate_from_flags(flags: RunFlags, model: NamedCostModel, clock: str) -> OverloadGate:
    params: dict[str, Any] = {}
    if flags.overload == "bounded":
        if flags.max_live is None:
            raise FlagError("--overload bounded needs --max-live N")
        params = {"max_live": flags.max_live}
    elif flags.max_live is not None:
        raise FlagError("--max-live applies only to --overload bounded")
    elif flags.overload == "slo-feasible":
        params = {"cost_model": model.spec, "clock": clock}
    try:
        return make_gate(flags.overload, params)
    except ValueError as exc:
        raise FlagError(str(exc)) from None


def window_from_flags(args: argparse.Namespace) -> ObservationWindow | None:
    if args.window is None:
        return None
    try:
        return ObservationWindow(*args.window)
    except ValueError as exc:
        raise FlagError(f"--window: {exc}") from None


def horizon_seconds(args: argparse.Namespace, setup: RunSetup) -> float | None:
    """The F63 horizon in seconds of the event log: --fairness-horizon, else
    None (the window). The guard's horizon is not reused: a forced interval
    completes one iteration after the guard fires."""
    online = setup.manifest.online
    horizon = args.fairness_horizon
    if horizon is None:
        return None
    if not horizon > 0:
        raise FlagError("--fairness-horizon must be > 0")
    return float(horizon * seconds_per_clock_unit(online.clock, setup.cost_model))


def run(args: argparse.Namespace) -> int:
    setup = setup_from_flags(RunFlags.from_args(args))
    window = window_from_flags(args)
    online = setup.manifest.online
    policy = bind_fairness(policy_for(args.policy, online, parse_settings(args.policy_setting),
                                      cost_model=setup.cost_model), online.fairness)
    config = RunConfig(policy, setup.cost_model, setup.gate, args.max_iterations)
    with contextlib.ExitStack() as stack:
        stream = None
        if args.decision_log:
            args.decision_log.parent.mkdir(parents=True, exist_ok=True)
            stream = stack.enter_context(args.decision_log.open("w"))
        progress = RunProgress(len(online.requests))
        stack.callback(progress.close)
        result = run_simulation(setup.manifest, config, stream, [progress])
    bytes_per_row = args.bytes_per_row
    if bytes_per_row is None and online.kv is not None:
        bytes_per_row = online.kv.bytes_per_row
    report = simulate_report(online, policy.policy_id, result.trace, bytes_per_row)
    report["kv"] = kv_report(result.executor.kv, result.trace, bytes_per_row)
    report["admission_evaluation"] = admission_report(online, setup.manifest.hidden, bytes_per_row)
    report["cost_model"] = {"spec": setup.cost_model.spec, "model_id": setup.cost_model.model_id}
    report["overload"] = {"contract": setup.gate.gate_id, "params": setup.gate.params(),
                          "num_rejected": len(result.engine.rejected)}
    args.out.mkdir(parents=True, exist_ok=True)
    label = f"{policy.policy_id} + {setup.gate.gate_id}"
    outputs = write_metric_outputs(args.out, result, online, setup.slo, window, label,
                                   plots=not args.no_plots,
                                   horizon_s=horizon_seconds(args, setup),
                                   bound_of=_bound_of(policy, online, result, report["kv"]))
    report["token_budget_utilisation"] = token_budget_utilisation(
        result.recorder.iterations, online.capacity.token_budget).to_dict()
    if outputs.summary is not None:
        report["summary"] = outputs.summary.to_dict()
    if outputs.report is not None:
        report["metrics"] = outputs.report.to_dict()
    if outputs.fairness is not None:
        report["fairness"] = outputs.fairness.to_dict()
        if outputs.bound is not None:
            report["fairness"]["bound"] = outputs.bound
        if result.ledger_trace.num_decisions:
            report["fairness"]["ledger_trace"] = result.ledger_trace.to_dict()
        if outputs.guard is not None:
            report["fairness"]["starvation_guard"] = outputs.guard
    (args.out / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(_summary_line(policy.policy_id, report, args.out))
    return 0


def _bound_of(policy: Policy, online: OnlineWorkload, run: SimulationRun,
              kv: dict[str, Any] | None) -> BoundOf | None:
    """The policy's declared service-difference bound, if it declares one (vtc)."""
    weights = getattr(policy, "ledger_weights", None)
    if getattr(policy, "service_bound", None) != "vtc" or weights is None:
        return None
    facts = run.executor.capacity()
    preemptions = 0 if kv is None else sum(
        value for key, value in kv["preemptions"].items() if key != "reason")
    return lambda fairness: vtc_bound_report(online, weights, facts.num_blocks_total,
                                             facts.block_size, preemptions, fairness)


def _summary_line(policy_id: str, report: dict[str, Any], out: Path) -> str:
    text = (f"{policy_id}: {report['iterations']} iterations, slot occupancy "
            f"{report['useful_slot_iterations']}/{report['available_slot_iterations']} = "
            f"{report['slot_occupancy']} ({report['slot_occupancy_label']})")
    metrics = report.get("metrics")
    if metrics is not None:
        outcomes = metrics["outcomes"]
        text += (f"; offered {outcomes['num_offered']}, SLO-valid {outcomes['num_slo_valid']}, "
                 f"rejected {outcomes['num_rejected']}, offered-load attainment "
                 f"{metrics['attainment']['offered_load']}")
    return f"{text} -> {out / 'report.json'}"
