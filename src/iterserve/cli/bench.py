"""``iterserve bench --url URL WORKLOAD --out DIR``: replay a workload's
arrivals against any OpenAI-compatible server (``iterserve serve``, vLLM,
...), streamed, and write the same event log and report.json as
``simulate``, with 0x0E coordinates (evidence class "measured here"), so
``iterserve compare`` puts the runs side by side or names why it cannot.

Writes DIR/events.jsonl, DIR/requests.jsonl (everything the client saw, one
line per request), DIR/report.json and DIR/report.md. See docs/bench.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console
from rich.progress import Progress

from iterserve.cli.flag_types import POSITIVE_INT, finite_float, non_empty, output_dir
from iterserve.cost import seconds_per_clock_unit
from iterserve.lab.bench_client import RequestRecord
from iterserve.lab.bench_md import render_bench
from iterserve.lab.bench_plan import ENDPOINTS, PlanOptions, RequestPlan, plan_requests
from iterserve.lab.bench_report import (
    METRIC_DEFINITIONS,
    events_of,
    outcome_counts,
    summary_dict,
    summary_sections,
)
from iterserve.lab.bench_run import (
    BenchInputError,
    ReplayOptions,
    ServerFacts,
    Target,
    choose_model,
    parse_url,
    probe_server,
    replay,
)
from iterserve.lab.run_record import (
    COORDINATES_SCHEMA,
    report_results,
    source_version,
    workload_coordinates,
)
from iterserve.records.canonical_json import canonical_json
from iterserve.records.spec import WorkloadManifest
from iterserve.records.workload import load_workload
from iterserve.sim.report import resolve_slo

REPORT_SCHEMA = "iterserve.bench.report/v1"
_PROGRESS_MIN_REQUESTS = 20  # fewer finish too fast for a bar to help


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench", help="send a workload's requests to any OpenAI-compatible server at their "
                      "arrival times and measure latency and throughput (docs/bench.md)")
    parser.add_argument("workload", type=Path, metavar="WORKLOAD", help="workload JSON file")
    parser.add_argument("--url", required=True, type=non_empty,
                        help="the server, e.g. http://127.0.0.1:8000 (a trailing /v1 is fine)")
    parser.add_argument("--out", type=output_dir, required=True,
                        help="run directory (absent or a directory)")
    parser.add_argument("--model", type=non_empty, default=None,
                        help="served model name (default: the first in /v1/models)")
    parser.add_argument("--api-key", type=non_empty, default=None,
                        help="sent as Authorization: Bearer KEY")
    parser.add_argument("--endpoint", choices=sorted(ENDPOINTS), default="completions",
                        help="completions (token-id prompts) or chat (synthetic text prompts)")
    parser.add_argument("--time-scale", type=finite_float(0.0, exclusive_min=True), default=1.0,
                        help="multiply every arrival time by this (default 1)")
    parser.add_argument("--max-concurrency", type=POSITIVE_INT, default=None,
                        help="at most this many requests in flight (default: open loop)")
    parser.add_argument("--timeout-s", type=finite_float(0.0, exclusive_min=True),
                        default=600.0, help="give up on one request after this long")
    parser.add_argument("--hardware", type=non_empty, default=None,
                        help="the server's hardware, recorded so compare can tell runs on "
                             "different machines apart (hardware coordinate, 0x0E)")
    parser.add_argument("--slo-ttft-ms", type=finite_float(0.0, exclusive_min=True),
                        default=None, help="latency target for the time to first token "
                                           "(TTFT), ms (default: the workload's per-request slo)")
    parser.add_argument("--slo-tbt-ms", type=finite_float(0.0, exclusive_min=True),
                        default=None, help="latency target for the time between output "
                                           "tokens (TBT), ms (default: the workload's slo)")
    parser.add_argument("--no-logprobs", action="store_true",
                        help="do not ask for logprobs (tokens per chunk then count as one "
                             "per non-empty chunk)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    manifest = load_workload(args.workload)
    target = Target(parse_url(args.url), args.api_key)
    online = manifest.online
    try:  # refused before anything is sent
        slo = resolve_slo(online, args.slo_ttft_ms, args.slo_tbt_ms)
    except ValueError as exc:
        raise BenchInputError(str(exc)) from None
    facts = probe_server(target)
    model = choose_model(facts, args.model)
    plans = plan_requests(manifest, PlanOptions(
        model, args.endpoint, args.time_scale, seconds_per_clock_unit(online.clock, None),
        not args.no_logprobs))
    records = _replay_with_progress(target, plans, ReplayOptions(
        args.endpoint, args.timeout_s, args.max_concurrency))
    log = events_of(records)
    label = _label(facts, model, args.endpoint)
    summary, metrics = summary_sections(log, label, slo)
    report = _report(args, manifest, facts, model, records, label)
    report["summary"] = None if summary is None else summary_dict(summary)
    if metrics is not None:
        report["metrics"] = metrics.to_dict()
    report["coordinates"] = _coordinates(args, manifest, facts, model, slo)
    report["results"] = report_results(report)
    _write(args.out, log, records, report)
    (args.out / "report.md").write_text(render_bench(report, summary, metrics))
    print(_summary_line(report, args.out))
    warning = _failure_warning(records)
    if warning is not None:
        print(warning, file=sys.stderr)
    return 0


def _report(args: argparse.Namespace, manifest: WorkloadManifest, facts: ServerFacts,
            model: str, records: list[RequestRecord], label: str) -> dict[str, Any]:
    """report.json's own sections (the summary, SLO metrics, coordinates and
    results are added by :func:`run`)."""
    return {
        "schema": REPORT_SCHEMA, "label": label, "workload_id": manifest.online.workload_id,
        "server": {"url": parse_url(args.url), "model": model, "version": facts.version,
                   "endpoint": ENDPOINTS[args.endpoint]},
        "replay": {"time_scale": args.time_scale, "max_concurrency": args.max_concurrency,
                   "timeout_s": args.timeout_s, "prompt_kinds": _prompt_kinds(records),
                   "max_send_lag_s": _max_lag_s(records)},
        "outcomes": outcome_counts(records), "metric_definitions": METRIC_DEFINITIONS,
    }


def _failure_warning(records: list[RequestRecord]) -> str | None:
    """One stderr line when requests failed, naming the first error (the
    report holds them all): a run that mostly failed should not look fine."""
    failed = [r for r in records if r.outcome not in ("finished", "rejected")]
    if not failed:
        return None
    return (f"iterserve bench: warning: {len(failed)} of {len(records)} requests failed; "
            f"first: {failed[0].request_id}: {failed[0].outcome}: {failed[0].error} "
            "(all in requests.jsonl)")


def _replay_with_progress(target: Target, plans: tuple[RequestPlan, ...],
                          options: ReplayOptions) -> list[RequestRecord]:
    console = Console(stderr=True)
    if not console.is_terminal or len(plans) < _PROGRESS_MIN_REQUESTS:
        return replay(target, plans, options)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("bench: requests ended", total=len(plans))
        return replay(target, plans, options, lambda _: progress.advance(task))


def _label(facts: ServerFacts, model: str, endpoint: str) -> str:
    server = f"server {facts.version}" if facts.version else "server without /version"
    return f"bench {model} ({server}, {endpoint})"


def _coordinates(args: argparse.Namespace, manifest: WorkloadManifest, facts: ServerFacts,
                 model: str, slo: Any) -> dict[str, Any]:
    """The 0x0E coordinates of a measured run (docs/bench.md)."""
    load = workload_coordinates(args.workload, manifest.online, args.time_scale)
    if args.endpoint == "chat":  # the server tokenizes the text: other prompt lengths
        load["workload"] += "; prompts sent as synthetic chat text, lengths server-tokenized"
    if args.max_concurrency is not None:
        load["load"] += f", at most {args.max_concurrency} in flight"
    host = urlsplit(args.url).hostname
    server_version = facts.version or "no /version"
    return {
        "schema": COORDINATES_SCHEMA,
        "source_version": f"{source_version()} bench client; server {server_version}",
        "source_location": _command_line(args),
        "model": f"served model {model}",
        "hardware": args.hardware or f"server on {host}, hardware not declared (--hardware)",
        "threads": None,
        **load,
        "baseline": "none (absolute values)",
        "slo": None if slo is None else canonical_json(
            {"ttft_ms": slo.ttft_ms, "tbt_ms": slo.tbt_ms}),
        "evidence_class": "measured here",
    }


def _command_line(args: argparse.Namespace) -> str:
    words = ["iterserve", "bench", "--url", args.url, args.workload.name,
             "--endpoint", args.endpoint, "--time-scale", str(args.time_scale)]
    if args.max_concurrency is not None:
        words += ["--max-concurrency", str(args.max_concurrency)]
    return shlex.join(words)


def _prompt_kinds(records: list[RequestRecord]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for record in records:
        kinds[record.prompt_kind] = kinds.get(record.prompt_kind, 0) + 1
    return kinds


def _max_lag_s(records: list[RequestRecord]) -> float | None:
    lags = [r.sent_s - r.scheduled_s for r in records if r.sent_s is not None]
    return max(lags) if lags else None


def _write(out: Path, log: Any, records: list[RequestRecord], report: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    log.write_jsonl(out / "events.jsonl")
    with (out / "requests.jsonl").open("w", encoding="utf-8") as stream:
        stream.writelines(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in records)
    (out / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")


def _summary_line(report: dict[str, Any], out: Path) -> str:
    counts = report["outcomes"]
    failed = counts["num_sent"] - counts["num_finished"] - counts["num_rejected"]
    return (f"{report['label']}: sent {counts['num_sent']}, finished {counts['num_finished']}, "
            f"rejected {counts['num_rejected']}, failed {failed}, output tokens "
            f"{counts['num_output_tokens']} -> {out / 'report.json'}")
