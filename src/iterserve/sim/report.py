"""``iterserve simulate`` runs and their reports (0x02, 0x07).

report.json: slot occupancy counts (request, iteration) pairs that held work
against max_num_seqs slots per iteration. It is a scheduling abstraction
and is labelled "not measured GPU utilization" wherever it appears (0x02).

:func:`run_simulation` wires one run: the workload's simulated executor timed
by a named cost model, the overload gate, the run trace, the metric event
recorder and optionally the decision log. :func:`write_metric_outputs` turns
its events into events.jsonl, report.md and PNG plots (0x07): the run
summary (latency distributions, throughput, preemptions, KV use) always, the
SLO outcome ledger when an SLO is declared.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Any, TypeVar

from iterserve.admission.overload import OverloadGate, engine_gate
from iterserve.cost import ClockedCost, IterationCostModel, seconds_per_clock_unit
from iterserve.engine.composition import composition_of
from iterserve.engine.decision_log import DecisionLogWriter, GateRecord
from iterserve.engine.events import EventRecorder
from iterserve.engine.loop import Engine, bind_policy
from iterserve.engine.observer import EngineObserver
from iterserve.engine.trace import RunTrace
from iterserve.metrics import (
    EventLog,
    ObservationWindow,
    Report,
    SloConfig,
    render_markdown,
)
from iterserve.metrics.chunk_ledger import PROXY_LABEL, ledger_from_starts
from iterserve.metrics.event_scan import EventScan, scan_events
from iterserve.metrics.fairness import FairnessReport, evaluate_fairness
from iterserve.metrics.fairness_md import render_fairness
from iterserve.metrics.outcomes import counts_by_client
from iterserve.metrics.report import evaluate_timelines
from iterserve.metrics.run_summary import RunSummary, summarize_timelines
from iterserve.metrics.series import ServiceWeights
from iterserve.metrics.summary_md import render_summary
from iterserve.metrics.time_unit import TimeUnit, clock_time_unit
from iterserve.metrics.timeline import RequestTimeline
from iterserve.plan import Policy
from iterserve.plan.kept_order import reads_view_deltas
from iterserve.policies.settings import settings_of
from iterserve.records.spec import OnlineWorkload, SloTargets, WorkloadManifest
from iterserve.records.state_digest import state_digest
from iterserve.sim.collector import collector_held_back
from iterserve.sim.executor import SimulatedExecutor
from iterserve.sim.factory import make_simulated_executor
from iterserve.sim.follower import (
    FeedReader,
    FollowerGone,
    FollowerProcess,
    FollowingExecutor,
    FollowingPolicy,
    RunEnd,
    TappedExecutor,
    TappedPolicy,
    can_fork,
    can_share,
)
from iterserve.sim.forked import BesideCall, ForkedCall, ForkedError
from iterserve.sim.layer_offload import LayerOffload, LayerOffloadCost
from iterserve.sim.ledger_trace import LedgerTrace

_T = TypeVar("_T")
OCCUPANCY_LABEL = ("logical slot occupancy: sequences per iteration / max_num_seqs; "
                   "not measured GPU utilization")


def chunk_ledger_report(workload: OnlineWorkload, trace: RunTrace,
                        bytes_per_row: int | None) -> dict[str, Any]:
    """Per-request and per-run 0x09 ledgers over completed prefills."""
    per_request: dict[str, dict[str, Any]] = {}
    for spec in workload.requests:
        starts = trace.prefill_chunk_starts.get(spec.request_id)
        record = trace.requests.get(spec.request_id)
        if not starts or record is None or record.first_token_time is None:
            continue
        # a planned prefix hit (0x0E) starts the first chunk past its cached rows
        ledger = ledger_from_starts(starts, spec.num_prompt_tokens, bytes_per_row,
                                    first_row=starts[0])
        per_request[spec.request_id] = {
            "chunk_starts": list(ledger.chunk_starts), "chunk_sizes": list(ledger.chunk_sizes),
            "causal_pairs": list(ledger.causal_pairs), "total_pairs": ledger.total_pairs,
            "history_rows": ledger.history_rows,
            "history_bytes_proxy": ledger.history_bytes_proxy,
        }
    history = sum(r["history_rows"] for r in per_request.values())
    return {
        "label": PROXY_LABEL,
        "bytes_per_row": bytes_per_row,
        "num_chunks": sum(len(r["chunk_sizes"]) for r in per_request.values()),
        "total_pairs": sum(r["total_pairs"] for r in per_request.values()),
        "history_rows": history,
        "history_bytes_proxy": None if bytes_per_row is None else history * bytes_per_row,
        "requests": per_request,
    }


def simulate_report(workload: OnlineWorkload, policy_id: str, trace: RunTrace,
                    bytes_per_row: int | None = None) -> dict[str, Any]:
    iterations = len(trace.iterations)
    useful = sum(record.num_sequences for record in trace.iterations)
    available = workload.capacity.max_num_seqs * iterations
    requests = {}
    for spec in workload.requests:
        record = trace.requests.get(spec.request_id)
        first = None if record is None else record.first_token_time
        finish = None if record is None else record.finish_time
        requests[spec.request_id] = {
            "arrival": spec.arrival,
            "first_token_cut": first,
            "finish_cut": finish,
            "emitted_tokens": 0 if record is None else record.num_emitted,
            "finish_reason": None if record is None else record.finish_reason,
        }
    return {
        "workload_id": workload.workload_id,
        "policy": policy_id,
        "clock": workload.clock,
        "iterations": iterations,
        "useful_slot_iterations": useful,
        "available_slot_iterations": available,
        "idle_slot_iterations": available - useful,
        "slot_occupancy": round(useful / available, 6) if available else None,
        "slot_occupancy_label": OCCUPANCY_LABEL,
        "token_rows": {
            "prefill": sum(r.num_prefill_rows for r in trace.iterations),
            "decode": sum(r.num_decode_rows for r in trace.iterations),
            "rebuild": sum(r.num_rebuild_rows for r in trace.iterations),
        },
        "requests": requests,
        "chunk_ledger": chunk_ledger_report(workload, trace, bytes_per_row),
    }


# --- a simulated run with its metric facts (0x07) ------------------------------------------
@dataclass(frozen=True, slots=True)
class RunConfig:
    """What one simulated run uses besides the workload. ``policy`` should
    already be bound to ``cost_model`` (``policies.deadline.bind_cost_model``)."""

    policy: Policy
    cost_model: IterationCostModel
    gate: OverloadGate | None = None
    max_iterations: int | None = None
    # layer offload (0x09B): the executor's clock is the cost model stretched by layer-readiness
    # stalls; the policy and the gate still predict with ``cost_model`` alone
    layer_offload: LayerOffload | None = None


@dataclass(frozen=True, slots=True)
class SimulationRun:
    engine: Engine
    trace: RunTrace
    recorder: EventRecorder
    executor: SimulatedExecutor
    ledger_trace: LedgerTrace


def costed_executor(manifest: WorkloadManifest, model: IterationCostModel,
                    layer_offload: LayerOffload | None = None) -> SimulatedExecutor:
    """The workload's simulated executor (its KV residency) timed by ``model``
    (stretched by ``layer_offload``'s readiness stalls when given)."""
    cost = ClockedCost(model, manifest.online.clock)
    if layer_offload is not None:
        cost = LayerOffloadCost(cost, layer_offload)
    return make_simulated_executor(manifest, cost)


def run_simulation(manifest: WorkloadManifest, config: RunConfig,
                   decision_log: IO[str] | None = None,
                   extra_observers: Sequence[EngineObserver] = (),
                   events: IO[str] | None = None, *,
                   log_process: bool = False) -> SimulationRun:
    """Run to completion (or ``max_iterations``), recording the run trace,
    the metric events and, when a stream is given, the decision log;
    ``extra_observers`` (a progress display) see every step too. With an
    ``events`` stream the metric events are written there as JSONL while the
    run goes (``events.jsonl``'s bytes) instead of being held in memory.

    ``log_process``: write the decision log and the events stream from a
    second process that follows the run's decisions
    (:mod:`iterserve.sim.follower`) where the machine allows it and at least
    one of the two streams is a file (:func:`can_share`; the other is then
    written here); the same bytes, fewer wall seconds. :class:`FollowerError`
    if the follower fails or ends elsewhere."""
    online = manifest.online
    executor = costed_executor(manifest, config.cost_model, config.layer_offload)
    unit_s = seconds_per_clock_unit(online.clock, config.cost_model)
    shared_log = decision_log if log_process and can_share(decision_log) else None
    shared_events = events if log_process and can_share(events) else None
    if (shared_log is not None or shared_events is not None) and can_fork():
        return _followed_run(manifest, config, executor, extra_observers, decision_log, events,
                             _Followed(shared_log, shared_events, unit_s))
    trace, ledger_trace = RunTrace(), LedgerTrace()
    recorder = EventRecorder(unit_s, events, composes=False)  # the trace counts the rows
    observers: list[EngineObserver] = [trace, recorder, ledger_trace]
    writer = None
    if decision_log is not None:
        writer = _log_writer(manifest, config, executor, decision_log)
        observers.append(writer)
    observers.extend(extra_observers)
    engine = Engine(online, config.policy, executor, observers, gate=engine_gate(config.gate))
    with collector_held_back():
        engine.run(max_iterations=config.max_iterations)
    recorder.close()
    if writer is not None:
        writer.close(engine.state, is_done=engine.is_done)
    return _composed(SimulationRun(engine, trace, recorder, executor, ledger_trace), unit_s)


def _composed(run: SimulationRun, unit_s: float) -> SimulationRun:
    """``run`` whose recorder holds the batch composition made from its
    trace (the recorders of a simulation are made with ``composes=False``)."""
    run.recorder.adopt_composition(composition_of(run.trace.iterations, unit_s))
    return run


@dataclass(frozen=True, slots=True)
class _Followed:
    """The streams the follower writes (the run writes the others).
    ``unit_s``: seconds in one unit of the run's clock (both recorders').

    The run trace and the ledger trace go where there is room: a follower
    that writes the decision log (its state digests are the larger half of
    the two processes' work) leaves them to the run; one that writes only
    the events keeps them and sends them back."""

    log: IO[str] | None
    events: IO[str] | None
    unit_s: float

    @property
    def keeps_traces(self) -> bool:
        return self.log is None


def _followed_run(manifest: WorkloadManifest, config: RunConfig, executor: SimulatedExecutor,
                  extra_observers: Sequence[EngineObserver], decision_log: IO[str] | None,
                  events: IO[str] | None, followed: _Followed) -> SimulationRun:
    """:func:`run_simulation` with a follower recording what ``followed``
    names; the rest is recorded here."""
    for stream in (followed.log, followed.events):
        if stream is not None:  # the child writes it: nothing of ours may sit in its buffer
            stream.flush()
    follower = FollowerProcess(lambda feed: _follow(feed, manifest, config, executor, followed))
    recorder = None if followed.events is not None else EventRecorder(followed.unit_s, events,
                                                                      composes=False)
    writer = None if followed.log is not None or decision_log is None else _log_writer(
        manifest, config, executor, decision_log)
    observers: list[EngineObserver] = [o for o in (recorder, writer) if o is not None]
    traces = None if followed.keeps_traces else (RunTrace(), LedgerTrace())
    if traces is not None:
        observers.extend(traces)
    try:
        engine = Engine(manifest.online, TappedPolicy(config.policy, follower.feed),
                        TappedExecutor(executor, follower.feed), [*observers, *extra_observers],
                        gate=engine_gate(config.gate), check_states=False,  # the follower's
                        # read by a log written here, or by a policy keeping its order
                        view_deltas=writer is not None or reads_view_deltas(config.policy))
        with collector_held_back():
            engine.run(max_iterations=config.max_iterations)
        if recorder is not None:
            recorder.close()
    except FollowerGone:
        follower.fail()  # raises the follower's reason
    except BaseException:
        follower.abandon()
        raise
    if writer is not None:
        writer.close(engine.state, is_done=engine.is_done)
    sent = follower.finish(RunEnd(engine.num_iterations, state_digest(engine.state)))
    trace, ledger_trace = traces or (sent["trace"], sent["ledger_trace"])
    return _composed(
        SimulationRun(engine, trace, recorder or sent["recorder"], executor, ledger_trace),
        followed.unit_s)


def _log_writer(manifest: WorkloadManifest, config: RunConfig, executor: SimulatedExecutor,
                stream: IO[str]) -> DecisionLogWriter:
    gate = config.gate
    record = None if gate is None else GateRecord(gate.gate_id, gate.params())
    offload = None if config.layer_offload is None else config.layer_offload.to_json()
    return DecisionLogWriter(stream, bind_policy(manifest.online, config.policy),
                             executor.capacity(), cost_model=config.cost_model.spec,
                             gate=record, policy_settings=settings_of(config.policy),
                             hidden=manifest.hidden, layer_offload=offload)


def _follow(feed: FeedReader, manifest: WorkloadManifest, config: RunConfig,
            executor: SimulatedExecutor, followed: _Followed) -> tuple[RunEnd, dict[str, Any]]:
    """The follower's run: the same engine answered from the feed, plan and
    result validation off (the run checked every plan and result), each
    decision's state checked here (the run leaves that to its follower), with
    the observers ``followed`` names and, where it keeps them, the two
    traces. Returns its end and what the run's report reads of them: the
    recorder (detached) and the traces."""
    observers: list[EngineObserver] = []
    sent: dict[str, Any] = {}
    if followed.events is not None:  # the composition: made from the trace at the end
        sent["recorder"] = EventRecorder(followed.unit_s, followed.events, composes=False)
    if followed.keeps_traces:
        sent["trace"], sent["ledger_trace"] = RunTrace(), LedgerTrace()
    observers.extend(sent.values())
    writer = None
    if followed.log is not None:  # the header's capacity: the executor as it was at the fork
        writer = _log_writer(manifest, config, executor, followed.log)
        observers.append(writer)
    engine = Engine(manifest.online, FollowingPolicy(config.policy, feed),
                    FollowingExecutor(feed), observers, gate=engine_gate(config.gate),
                    validate=False, check_states=True)
    with collector_held_back():
        engine.run(max_iterations=config.max_iterations)
    feed.expect_end()
    if writer is not None:
        assert followed.log is not None
        writer.close(engine.state, is_done=engine.is_done)
        followed.log.flush()
    if followed.events is not None:
        sent["recorder"] = sent["recorder"].detached()
        followed.events.flush()
    return RunEnd(engine.num_iterations, state_digest(engine.state)), sent


class SloResolutionError(ValueError):
    """The workload's per-request SLOs differ and no run-wide SLO was given."""


def resolve_slo(workload: OnlineWorkload, ttft_ms: float | None = None,
                tbt_ms: float | None = None) -> SloConfig | None:
    """The run-wide SLO the evaluator judges: each flag, else the workload's
    per-request value (which must then be the same for every request that
    declares one). None when nothing is declared."""
    declared = {(r.slo.ttft_ms, r.slo.tbt_ms) for r in workload.requests if r.slo is not None}
    if len(declared) > 1 and (ttft_ms is None or tbt_ms is None):
        raise SloResolutionError(
            "requests declare different SLOs; pass --slo-ttft-ms and --slo-tbt-ms")
    workload_ttft, workload_tbt = declared.pop() if declared else (None, None)
    ttft = workload_ttft if ttft_ms is None else ttft_ms
    tbt = workload_tbt if tbt_ms is None else tbt_ms
    if ttft is None and tbt is None:
        return None
    return SloConfig(ttft_ms=ttft, tbt_ms=tbt)


def with_default_slo(workload: OnlineWorkload, slo: SloConfig) -> OnlineWorkload:
    """Requests that declare no SLO get the run's, so the deadline policies
    and gates plan against the contract the evaluator judges."""
    targets = SloTargets(slo.ttft_ms, slo.tbt_ms)
    requests = tuple(r if r.slo is not None else dataclasses.replace(r, slo=targets)
                     for r in workload.requests)
    return dataclasses.replace(workload, requests=requests)


def default_window(log: EventLog) -> ObservationWindow:
    """From the first arrival to just after the last fact: the window is
    half-open, so its end is the next float after the last event's time."""
    times = [event.time_s for event in log]
    if not times:
        raise ValueError("no events: nothing arrived")
    return ObservationWindow(times[0], math.nextafter(times[-1], math.inf))


def service_weights_of(workload: OnlineWorkload) -> tuple[ServiceWeights, dict[str, float]]:
    """The run's declared service weights (workload ``fairness``; 1, 1 otherwise)."""
    spec = workload.fairness
    if spec is None:
        return ServiceWeights(), {}
    return ServiceWeights(spec.prompt_weight, spec.output_weight), dict(spec.client_weights)


BoundOf = Callable[[FairnessReport], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class MetricOutputs:
    summary: RunSummary | None  # None when nothing arrived
    report: Report | None  # the SLO evaluation; None without an SLO
    fairness: FairnessReport | None = None  # 0x09A measures; None when nothing arrived
    bound: dict[str, Any] | None = None  # a policy's declared service bound (vtc)
    guard: dict[str, Any] | None = None  # the starvation guard's firings


def run_fairness(timelines: Iterable[RequestTimeline], workload: OnlineWorkload,
                 window: ObservationWindow, horizon_s: float | None = None) -> FairnessReport:
    """0x09A measures over timelines holding the facts before the window's end."""
    weights, client_weights = service_weights_of(workload)
    return evaluate_fairness(timelines, window, weights, client_weights, horizon_s)


def write_metric_outputs(out_dir: Path, run: SimulationRun, workload: OnlineWorkload,
                         slo: SloConfig | None, window: ObservationWindow | None,
                         label: str, *, plots: bool = True, horizon_s: float | None = None,
                         bound_of: BoundOf | None = None) -> MetricOutputs:
    """events.jsonl, report.md (with the fairness section, 0x09A) and
    (unless ``plots`` is False) the PNG plots. The run summary and the
    fairness measures are written with or without an SLO; the metrics
    report (outcome ledger, attainment) only when one is declared.

    A recorder that streamed its events (``run_simulation(events=...)``)
    must have streamed them to ``out_dir/events.jsonl``; one that held them
    writes them there now. Either way the report reads that file in one
    streaming pass (:mod:`iterserve.metrics.event_scan`): the report phase
    holds compact timelines (8 bytes a token), never the event objects.

    A long run (:func:`is_long_run`) draws its
    plots in forked children while this process reads and measures: the
    batch composition and the queue and KV series (the recorder's) beside
    the scan, the service plot (the timelines') and the fairness measures
    beside the run summary, the latency plot (the summary's) beside the
    evaluation. On a long run the summary, the fairness measures and the
    service plot are each among the report phase's largest parts, so each
    gets a CPU. A failure stops them."""
    recorder = run.recorder
    events_path = out_dir / "events.jsonl"
    if not recorder.is_streaming:
        recorder.log().write_jsonl(events_path)
    unit = clock_time_unit(workload.clock, recorder.seconds_per_clock_unit)
    long_run = is_long_run(run)
    beside = plots and long_run
    with contextlib.ExitStack() as children:  # each child is stopped unless it was waited for
        def draw_beside(call: Callable[[], None]) -> ForkedCall:
            child = ForkedCall(call)
            children.callback(child.kill)  # nothing once its value was read
            return child

        series = None
        if beside:
            series = draw_beside(partial(_plot_series, out_dir, recorder,
                                         workload.capacity.max_num_batched_tokens, unit))
        scanned = _scan_window(events_path, window)
        if scanned is None:
            (out_dir / "report.md").write_text(
                f"# {workload.workload_id}: {label}\n\nNothing arrived: no events.\n")
            return MetricOutputs(None, None)
        scan, window = scanned
        del scanned
        observed = scan.timelines
        weights, _ = service_weights_of(workload)
        service = None
        if beside:
            service = draw_beside(partial(_plot_service, out_dir, observed.values(), window,
                                          unit, weights))
        fairness_beside = BesideCall(partial(run_fairness, observed.values(), workload, window,
                                             horizon_s), fork=long_run)
        children.callback(fairness_beside.kill)
        summary = summarize_timelines(
            observed, window, unit, label=label, preempt_modes=scan.preempt_modes(window),
            num_resumes=scan.num_resumes(window), iterations=recorder.iterations,
            resources=recorder.samples,
            max_num_batched_tokens=workload.capacity.max_num_batched_tokens,
            max_num_seqs=workload.capacity.max_num_seqs)
        latency = None
        if beside:
            latency = draw_beside(partial(_plot_latency, out_dir, summary, slo, unit))
        report = None if slo is None else evaluate_timelines(observed, slo, window, label=label,
                                                             service_weights=weights)
        fairness = _child_value(fairness_beside.value, "measuring fairness")
        bound = None if bound_of is None else bound_of(fairness)
        horizon = None if workload.fairness is None else workload.fairness.starvation_horizon
        guard = None if horizon is None else run.ledger_trace.guard_dict(horizon)
        if plots and not beside:  # the last reader of the timelines: the other plots need
            _plot_service(out_dir, observed.values(), window, unit, weights)  # the series
        del scan, observed  # (8 bytes a token) before the figures of the other plots are made
        (out_dir / "report.md").write_text(
            _report_text(f"{workload.workload_id}: {label}", label, summary, report, fairness,
                         bound, guard, unit))
        if plots and not beside:
            _plot_latency(out_dir, summary, slo, unit)
            _plot_series(out_dir, recorder, workload.capacity.max_num_batched_tokens, unit)
        for child in (series, service, latency):
            if child is not None:
                _child_value(child.value, "drawing the plots")
    return MetricOutputs(summary, report, fairness, bound, guard)


def _scan_window(events_path: Path, window: ObservationWindow | None
                 ) -> tuple[EventScan, ObservationWindow] | None:
    """The file's scan holding the facts ``window`` (by default: from the
    first fact to the last) observes, and that window; None without a fact."""
    scan = scan_events(events_path, compact=True)
    if not scan.num_events:
        return None
    window = window or scan.default_window()
    if not scan.covers(window):  # facts past the window's end: rebuild up to it
        del scan
        scan = scan_events(events_path, end_s=window.end_s, compact=True)
    return scan, window


def _child_value(value: Callable[[], _T], doing: str) -> _T:
    """A child's value (``value``: its ``value`` method); its failure named
    by what it was ``doing``."""
    try:
        return value()
    except ForkedError as error:
        raise ForkedError(f"{doing}: {error}") from None


def _report_text(title: str, label: str, summary: RunSummary, report: Report | None,
                 fairness: FairnessReport, bound: dict[str, Any] | None,
                 guard: dict[str, Any] | None, unit: TimeUnit) -> str:
    """report.md: the run summary, the SLO evaluation (or why there is
    none) and the fairness section."""
    lines = [f"# {title}", "", *render_summary(summary), ""]
    if report is None:
        lines += ["## Latency targets (SLO)", "",
                  "No SLO declared (set one in the workload's `slo` or with "
                  "--slo-ttft-ms/--slo-tbt-ms), so no request is judged within or late: "
                  "no outcome ledger, no attainment.", ""]
        text = "\n".join(lines)
    else:
        text = "\n".join(lines) + "\n" + render_markdown(
            [report], title=f"Judged against the latency targets (SLO evaluation): {label}")
    outcomes = None if report is None else counts_by_client(report.request_outcomes)
    return text + "\n" + render_fairness(fairness, outcomes, bound, guard, unit)


#: a run of at least this many iterations (two usable CPUs) makes its report's slower parts
#: in forked children while this process makes the others: the plots, the fairness
#: measures, report.json's per-request sections (``iterserve simulate``)
BESIDE_ITERATIONS = 20_000


def is_long_run(run: SimulationRun) -> bool:
    """``run``'s report is worth forked children (:data:`BESIDE_ITERATIONS`)."""
    return len(run.recorder.iterations) >= BESIDE_ITERATIONS and can_fork()


def _plot_service(out_dir: Path, timelines: Iterable[RequestTimeline],
                  window: ObservationWindow, unit: TimeUnit, weights: ServiceWeights) -> None:
    # imported here: matplotlib is slow to import, and other commands should not pay for it
    from iterserve.metrics.plots import plot_timelines_service

    plot_timelines_service(timelines, out_dir / "client_service.png", window=window,
                           unit=unit, weights=weights)


def _plot_latency(out_dir: Path, summary: RunSummary, slo: SloConfig | None,
                  unit: TimeUnit) -> None:
    from iterserve.metrics.plots import plot_latency_distributions

    plot_latency_distributions(summary.samples, out_dir / "latency_cdfs.png", label=summary.label,
                               unit=unit, ttft_limit_ms=None if slo is None else slo.ttft_ms,
                               tbt_limit_ms=None if slo is None else slo.tbt_ms)


def _plot_series(out_dir: Path, recorder: EventRecorder, max_num_batched_tokens: int,
                 unit: TimeUnit) -> None:
    """The plots of the recorder's per-iteration series (what the other child draws)."""
    if not recorder.iterations:
        return
    from iterserve.metrics.plots import plot_batch_composition, plot_queue_and_kv

    plot_batch_composition(recorder.iterations, out_dir / "batch_composition.png",
                           max_rows_per_iteration=max_num_batched_tokens, unit=unit)
    plot_queue_and_kv(recorder.samples, out_dir / "queue_and_kv.png", unit=unit)
