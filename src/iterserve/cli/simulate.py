"""``iterserve simulate``: run a workload file on the simulated executor.

Writes DIR/report.json (slot occupancy, per-request cuts, chunk ledger, and
``metrics`` (0x07) when an SLO is declared), DIR/events.jsonl, DIR/report.md
and PNG plots. See docs/metrics.md section 7.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from iterserve.admission.overload import OverloadGate, make_gate
from iterserve.cli.fairness_flags import (
    FairnessFlagError,
    add_fairness_flags,
    add_fairness_horizon_flag,
    bound_of,
    fairness_from_flags,
    horizon_seconds,
)
from iterserve.cli.flag_types import (
    POSITIVE_INT,
    finite_float,
    int_at_least,
    output_dir,
    output_file,
)
from iterserve.cli.layer_offload_flag import (
    LayerOffloadFlagError,
    add_layer_offload_flag,
    check_layer_offload,
    with_offload_hardware,
    write_layer_offload,
)
from iterserve.cli.output_files import pending_file, staged_directory
from iterserve.cli.progress import RunProgress
from iterserve.cost import (
    IterationCostModel,
    default_cost_model,
    parse_cost_model,
    seconds_per_clock_unit,
)
from iterserve.lab.run_record import report_results, run_coordinates
from iterserve.metrics import ObservationWindow, SloConfig
from iterserve.metrics.capacity import batched_tokens_utilisation
from iterserve.plan.feasibility import check_run
from iterserve.policies.registry import bind_fairness, policy_for
from iterserve.policies.settings import add_policy_setting_flag, settings_of
from iterserve.records.compressed_text import compressed_text, is_compressed_path
from iterserve.records.limits import MAX_BYTES_PER_ROW
from iterserve.records.pretty_json import encode_section, write_sorted_json
from iterserve.records.spec import OnlineWorkload, WorkloadManifest
from iterserve.records.workload import load_workload
from iterserve.sim.admission_report import admission_report
from iterserve.sim.collector import collector_held_back
from iterserve.sim.factory import make_simulated_executor
from iterserve.sim.forked import BesideCall
from iterserve.sim.kv_report import kv_report
from iterserve.sim.layer_offload import LayerOffload, LayerOffloadCost
from iterserve.sim.report import (
    MetricOutputs,
    RunConfig,
    SimulationRun,
    is_long_run,
    resolve_slo,
    run_simulation,
    simulate_report,
    with_default_slo,
    write_metric_outputs,
)


class FlagError(ValueError):
    """A command-line flag is malformed or does not fit the workload."""


@contextlib.contextmanager
def writing_to(output: str) -> Iterator[None]:
    """An OSError in the block (an output file or directory that cannot be
    made or written) becomes a :class:`FlagError` naming ``output``, e.g.
    ``--out DIR``."""
    try:
        yield
    except OSError as exc:
        raise FlagError(f"{output}: cannot write ({exc.strerror or exc})") from None


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """Flags shared by ``simulate`` and ``sweep``."""
    parser.add_argument("--workload", type=Path, required=True,
                        help="workload JSON file (docs/workloads.md)")
    parser.add_argument("--cost-model", metavar="NAME[:params]",
                        help="how long each simulated step takes: fixed:MS (every step the "
                             "same), linear:BASE_MS,PREFILL_ROW_MS,DECODE_ROW_MS (a base plus a "
                             "cost per prompt and per output token), or profile:FILE (fitted by "
                             "`iterserve profile` on a real model). Default: 1 s per step on "
                             "the iteration clock, 1 ms on the ms clock; a placeholder, not a "
                             "realistic speed")
    parser.add_argument("--overload", default="accept-all",
                        help="what to do with arrivals under overload (overload contract): "
                             "accept-all, bounded (at most --max-live requests at once), "
                             "slo-feasible (turn away requests that cannot meet their "
                             "latency targets)")
    parser.add_argument("--max-live", type=int, default=None,
                        help="most requests admitted at once, for --overload bounded")
    parser.add_argument("--slo-ttft-ms", type=finite_float(), default=None,
                        help="latency target for the time to first token (TTFT), ms "
                             "(default: the workload's per-request slo)")
    parser.add_argument("--slo-tbt-ms", type=finite_float(), default=None,
                        help="latency target for the time between output tokens (TBT), ms "
                             "(default: the workload's per-request slo)")
    add_fairness_flags(parser)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "simulate", help="run a workload through a scheduling policy on a simulated clock",
        description="Run a workload through one scheduling policy on the simulated executor "
                    "(the real scheduler, a modelled step time). Writes report.json, "
                    "report.md, events.jsonl and plots to --out (docs/lab.md).")
    add_run_flags(parser)
    parser.add_argument("--policy", required=True, help="policy name (see `iterserve policies`)")
    add_policy_setting_flag(parser)
    parser.add_argument("--out", type=output_dir, required=True,
                        help="output directory (absent or a directory)")
    parser.add_argument("--decision-log", type=output_file,
                        help="write every scheduling decision to this JSONL file (decision "
                             "log), for `iterserve replay`; written only once the run "
                             "succeeds; a path ending .zst is written zstd-compressed")
    parser.add_argument("--log-process", choices=("auto", "off"), default="auto",
                        help="auto: with two usable CPUs a second process writes the decision "
                             "log and events.jsonl and checks each decision's state (the same "
                             "bytes, sooner); off: one process does it all")
    parser.add_argument("--max-iterations", type=POSITIVE_INT, default=None,
                        help="stop after this many scheduler steps (iterations)")
    parser.add_argument("--window", type=finite_float(0.0), nargs=2, metavar=("START_S", "END_S"),
                        help="observation window in seconds (default: first arrival to the "
                             "last event)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--bytes-per-row", type=int_at_least(1, MAX_BYTES_PER_ROW), default=None,
                        help="KV cache bytes per token, for the estimate of prefix bytes "
                             "re-read by chunked prefill (0x09 exposure proxy)")
    add_fairness_horizon_flag(parser)
    add_layer_offload_flag(parser)
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
    cost_model: IterationCostModel
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
    try:
        fairness = fairness_from_flags(flags.prompt_weight, flags.output_weight,
                                       flags.client_weights, flags.starvation_horizon,
                                       online.fairness)
    except FairnessFlagError as exc:
        raise FlagError(str(exc)) from None
    manifest = WorkloadManifest(dataclasses.replace(online, fairness=fairness), manifest.hidden)
    return RunSetup(manifest, slo, model, gate_from_flags(flags, model, online.clock))


def gate_from_flags(flags: RunFlags, model: IterationCostModel, clock: str) -> OverloadGate:
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


def run(args: argparse.Namespace) -> int:
    # the whole command, its report phase and forked children too, makes no reference cycles
    # worth a collector pass: the passes would only walk the growing set of live objects
    with collector_held_back():
        return _simulate(args)


def _simulate(args: argparse.Namespace) -> int:
    setup = setup_from_flags(RunFlags.from_args(args))
    window = window_from_flags(args)
    online = setup.manifest.online
    try:
        check_layer_offload(args.layer_offload, online)
    except LayerOffloadFlagError as exc:
        raise FlagError(str(exc)) from None
    policy = bind_fairness(policy_for(args.policy, online, dict(args.policy_setting),
                                      cost_model=setup.cost_model), online.fairness)
    config = RunConfig(policy, setup.cost_model, setup.gate, args.max_iterations,
                       args.layer_offload)
    # refused before anything is written (the engine checks again when made)
    check_run(policy, online, make_simulated_executor(setup.manifest).capacity())
    # before the run: hashing the workload file re-reads it whole (not beside the run's records)
    coordinates = _coordinates(args.workload, setup, args.layer_offload)
    with contextlib.ExitStack() as stack:
        # every file of --out is written here first and moves into --out only once the
        # whole run has succeeded (a full disk leaves --out as it was)
        out = stack.enter_context(staged_directory(args.out, "--out"))
        stream = None
        if args.decision_log:  # committed only when everything below succeeds
            stream = stack.enter_context(pending_file(args.decision_log, "--decision-log",
                                                      buffering=STREAM_BUFFER_BYTES,
                                                      may_make_dir=True))
            if is_compressed_path(args.decision_log):  # zstd as it is written, frames ended
                stream = stack.enter_context(contextlib.closing(compressed_text(stream.buffer)))
        progress = RunProgress(len(online.requests))
        stack.callback(progress.close)
        # the metric events go to disk as the run goes, not to memory (bounded memory)
        with (out / "events.jsonl").open("w", encoding="utf-8",
                                         buffering=STREAM_BUFFER_BYTES) as events:
            result = run_simulation(setup.manifest, config, stream, [progress], events=events,
                                    log_process=args.log_process == "auto")
        progress.phase("report" if args.no_plots else "report and plots")
        bytes_per_row = _bytes_per_row(args, online)
        # the per-request sections (a long run's: tens of MB of text) beside the scan
        sections = BesideCall(partial(_run_sections, setup, policy.policy_id, result,
                                      bytes_per_row),
                              fork=is_long_run(result))
        stack.callback(sections.kill)
        kv = kv_report(result.executor.kv, result.trace, bytes_per_row)
        outputs = write_metric_outputs(
            out, result, online, setup.slo, window,
            f"{policy.policy_id} + {setup.gate.gate_id}", plots=not args.no_plots,
            horizon_s=horizon_seconds(args.fairness_horizon, online, setup.cost_model),
            bound_of=bound_of(policy, online, result, kv))
        # made here, the per-request sections once the report phase has let its timelines go
        report, encoded = sections.value()
        report["kv"] = kv
        if isinstance(result.executor.cost, LayerOffloadCost):
            report["layer_offload"] = write_layer_offload(out, result.executor.cost)
        if outputs.summary is not None:
            report["summary"] = outputs.summary.to_dict()
        if outputs.report is not None:
            report["metrics"] = outputs.report.to_dict()
        if outputs.fairness is not None:
            report["fairness"] = _fairness_section(outputs, result)
        _add_coordinates(report, coordinates, f"{policy.policy_id} + {setup.gate.gate_id}",
                         settings_of(policy))
        with (out / "report.json").open("wb") as report_stream:  # a section at a time
            write_sorted_json(report_stream, report, encoded)
            report_stream.write(b"\n")
    print(_summary_line(policy.policy_id, report, args.out))
    return 0


def _bytes_per_row(args: argparse.Namespace, online: OnlineWorkload) -> int | None:
    """--bytes-per-row, else the workload's KV bytes per row (0x09 exposure proxy)."""
    if args.bytes_per_row is None and online.kv is not None:
        return online.kv.bytes_per_row
    return args.bytes_per_row


#: report.json's per-request sections: encoded in a forked child beside the report phase's
#: scan in a long run (``is_long_run``); made after the rest of the report phase, they
#: would keep one CPU busy alone at its end.
PER_REQUEST_SECTIONS = ("requests", "chunk_ledger")


def _run_sections(setup: RunSetup, policy_id: str, result: SimulationRun,
                  bytes_per_row: int | None) -> tuple[dict[str, Any], dict[str, bytes]]:
    """:func:`_report`, its :data:`PER_REQUEST_SECTIONS` encoded
    (:func:`~iterserve.records.pretty_json.encode_section`)."""
    report = _report(setup, policy_id, result, bytes_per_row)
    return report, {key: encode_section(report.pop(key)) for key in PER_REQUEST_SECTIONS}


def _report(setup: RunSetup, policy_id: str, result: SimulationRun,
            bytes_per_row: int | None) -> dict[str, Any]:
    """report.json's run sections but ``kv`` (made first: a bound reads it)."""
    online = setup.manifest.online
    report = simulate_report(online, policy_id, result.trace, bytes_per_row)
    report["admission_evaluation"] = admission_report(online, setup.manifest.hidden, bytes_per_row)
    report["cost_model"] = {"spec": setup.cost_model.spec, "model_id": setup.cost_model.model_id}
    report["overload"] = {"contract": setup.gate.gate_id, "params": setup.gate.params(),
                          "num_rejected": len(result.engine.rejected)}
    report["batched_tokens_utilisation"] = batched_tokens_utilisation(
        result.recorder.iterations, online.capacity.max_num_batched_tokens).to_dict()
    return report


def _fairness_section(outputs: MetricOutputs, result: SimulationRun) -> dict[str, Any]:
    """report.json ``fairness`` (0x09A, docs/metrics.md section 8)."""
    assert outputs.fairness is not None
    section = outputs.fairness.to_dict()
    if outputs.bound is not None:
        section["bound"] = outputs.bound
    if result.ledger_trace.num_decisions:
        section["ledger_trace"] = result.ledger_trace.to_dict()
    if outputs.guard is not None:
        section["starvation_guard"] = outputs.guard
    return section


def _coordinates(workload: Path, setup: RunSetup,
                 layer_offload: LayerOffload | None) -> dict[str, Any]:
    """The 0x0E result coordinates of the run ``setup`` describes."""
    slo = None if setup.slo is None else {"ttft_ms": setup.slo.ttft_ms, "tbt_ms": setup.slo.tbt_ms}
    return with_offload_hardware(run_coordinates(workload, setup.manifest.online,
                                                 setup.cost_model.spec,
                                                 setup.cost_model.model_id, slo), layer_offload)


def _add_coordinates(report: dict[str, Any], coordinates: dict[str, Any], label: str,
                     settings: dict[str, Any]) -> None:
    """The 0x0E result coordinates, the run's label and its results."""
    report["coordinates"] = coordinates
    if settings:
        label += f" ({', '.join(f'{k}={v}' for k, v in sorted(settings.items()))})"
    report["label"] = label
    report["results"] = report_results(report)


def _summary_line(policy_id: str, report: dict[str, Any], out: Path) -> str:
    text = (f"{policy_id}: {report['iterations']} iterations, slot occupancy "
            f"{report['useful_slot_iterations']}/{report['available_slot_iterations']} = "
            f"{report['slot_occupancy']} ({report['slot_occupancy_label']})")
    metrics = report.get("metrics")
    if metrics is not None:
        outcomes = metrics["outcomes"]
        text += (f"; {outcomes['num_offered']} arrived (offered), "
                 f"{outcomes['num_slo_valid']} within their latency targets (SLO-valid), "
                 f"{outcomes['num_rejected']} turned away (rejected); share within targets "
                 f"(offered-load attainment) {metrics['attainment']['offered_load']}")
    return f"{text} -> {out / 'report.json'}"


#: The write buffer of a run's output streams. A decision log line is about 10 KB, more than
#: the default 8 KiB, so each line was a write call of its own: at 100,000 requests the
#: follower spent measurably more time in the kernel than with a MiB at a time.
STREAM_BUFFER_BYTES = 1 << 20
