"""``report.md`` rendering: comparison tables for one or more reports (0x07).

Every table that shows a conditional rate shows offered-load attainment in
the same table, and withheld percentiles are printed as ``n<gate`` with the
sample size, never as a number. Row labels are plain words with the spec's
term and symbol in parentheses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from iterserve.metrics.capacity import SLOT_OCCUPANCY_LABEL, SlotOccupancy
from iterserve.metrics.outcomes import COMPLETION_CONDITIONED_LABEL
from iterserve.metrics.percentiles import min_sample_size
from iterserve.metrics.report import Report

_OUTCOME_ROWS = (
    ("arrived in the window (offered, N_off)", "num_offered"),
    ("let in to run (admitted, N_adm)", "num_admitted"),
    ("finished (completed, N_comp)", "num_completed"),
    ("finished within every latency target (SLO-valid, N_valid)", "num_slo_valid"),
    ("finished late on some target (completed miss, N_miss)", "num_completed_miss"),
    ("turned away (rejected, N_rej)", "num_rejected"),
    ("not finished in the window (unfinished, N_open)", "num_unfinished"),
)
_RATE_ROWS = (
    ("arrivals per second (offered rate, req/s)", "offered_rate_per_s"),
    ("finished requests per second (request throughput, req/s)", "request_throughput_per_s"),
    ("requests within their targets per second (request goodput, req/s)",
     "request_goodput_per_s"),
    ("output tokens per second (emitted-token throughput, tok/s)",
     "emitted_token_throughput_per_s"),
    ("output tokens of requests within their targets per second "
     "(SLO-valid token goodput, tok/s)", "slo_valid_token_goodput_per_s"),
)
_LATENCY_NAMES = {
    "ttft": "time to first token (TTFT)",
    "tbt": "time between output tokens (TBT)",
    "tpot": "mean time per output token after the first (TPOT)",
    "end_to_end": "arrival to last token (end-to-end)",
    "queue": "arrival to first admission (queue time)",
}


def render_markdown(
    reports: Sequence[Report],
    *,
    title: str = "iterserve metrics report",
    occupancy: Mapping[str, SlotOccupancy] | None = None,
) -> str:
    """Render reports side by side (one column per label) as Markdown."""
    if not reports:
        raise ValueError("render_markdown needs at least one report")
    dicts = [report.to_dict() for report in reports]
    first = reports[0]
    lines = [
        f"# {title}",
        "",
        f"Window [{first.window.start_s:g} s, {first.window.end_s:g} s); "
        f"latency targets (SLO) {_slo_text(first.to_dict()['slo'])}. "
        "Definitions: spec section 0x07.",
        "",
        "## What happened to each request (outcomes)",
        "",
        *_table(dicts, [(name, _getter("outcomes", key)) for name, key in _OUTCOME_ROWS]),
        "",
        "Why requests were not finished (unfinished reasons): "
        + "; ".join(f"{d['label']}: {_pairs(d['outcomes']['unfinished_reasons'])}" for d in dicts),
        "",
        "## Share of requests within their latency targets (attainment)",
        "",
        *_table(dicts, _attainment_rows()),
        "",
        f"Completion-conditioned attainment is {COMPLETION_CONDITIONED_LABEL}.",
        "",
        "## Rates (throughput and goodput)",
        "",
        *_table(dicts, [(name, _getter("rates", key)) for name, key in _RATE_ROWS]),
        "",
        "## Latency (ms; percentiles by nearest rank, shown only with enough samples: "
        "p50 n>=2, p95 n>=20, p99 n>=100)",
        "",
        *_table(dicts, _latency_rows()),
    ]
    for report in dicts:
        lines += ["", f"## Per client: {report['label']}", "", *_client_table(report)]
    if occupancy:
        lines += ["", f"## {SLOT_OCCUPANCY_LABEL}", "", *_occupancy_table(occupancy)]
    return "\n".join(lines) + "\n"


def _table(dicts: Sequence[dict[str, Any]], rows: Sequence[tuple[str, Any]]) -> list[str]:
    header = "| metric | " + " | ".join(str(d["label"]) for d in dicts) + " |"
    rule = "|---|" + "---:|" * len(dicts)
    body = [f"| {name} | " + " | ".join(_cell(get(d)) for d in dicts) + " |" for name, get in rows]
    return [header, rule, *body]


def _getter(section: str, key: str) -> Any:
    return lambda report: report[section][key]


def _attainment_rows() -> list[tuple[str, Any]]:
    return [
        (
            "of all arrivals (offered-load attainment, N_valid/N_off)",
            lambda d: _percent(d["attainment"]["offered_load"]),
        ),
        (
            "of the requests let in (admitted attainment, N_valid/N_adm)",
            lambda d: _percent(d["attainment"]["admitted"]),
        ),
        (
            "of the finished requests only (completion-conditioned, diagnostic, "
            "N_valid/N_comp)",
            lambda d: _percent(d["attainment"]["completion_conditioned"]["value"]),
        ),
    ]


def _latency_rows() -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for name, label in _LATENCY_NAMES.items():
        rows.append((f"{label} n", _latency_getter(name, "n")))
        rows.append((f"{label} mean", _latency_getter(name, "mean")))
        for percentile in ("p50", "p95", "p99"):
            rows.append((f"{label} {percentile}", _latency_getter(name, percentile)))
    return rows


def _latency_getter(name: str, key: str) -> Any:
    def get(report: dict[str, Any]) -> Any:
        value = report["latency_ms"][name][key]
        if not isinstance(value, dict):
            return value
        if value["status"] == "ok":
            return value["value"]
        return f"n={value['n']}<{min_sample_size(float(key[1:]))}"

    return get


def _client_table(report: dict[str, Any]) -> list[str]:
    lines = [
        "| client | arrived (offered) | within targets (SLO-valid) | late (miss) "
        "| turned away (rejected) | not finished (unfinished) "
        "| share within targets (offered-load attainment) | output tokens "
        "| weighted work done in the window (service) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for client, entry in report["per_client"].items():
        counts = entry["outcomes"]
        lines.append(
            f"| {client} | {counts['num_offered']} | {counts['num_slo_valid']} "
            f"| {counts['num_completed_miss']} | {counts['num_rejected']} "
            f"| {counts['num_unfinished']} | {_percent(entry['attainment']['offered_load'])} "
            f"| {entry['num_emitted_tokens']} | {_cell(entry['service_in_window'])} |"
        )
    return lines


def _occupancy_table(occupancy: Mapping[str, SlotOccupancy]) -> list[str]:
    lines = [
        "| label | iterations | useful | available | idle | rebuild "
        "| slot occupancy (not measured GPU utilization) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, item in occupancy.items():
        lines.append(
            f"| {label} | {item.num_iterations} | {item.num_useful_slot_iterations} "
            f"| {item.num_available_slot_iterations} | {item.num_idle_slot_iterations} "
            f"| {item.num_rebuild_slot_iterations} | {_percent(item.occupancy)} |"
        )
    return lines


def _slo_text(slo: dict[str, Any]) -> str:
    parts = [
        f"{name[:-3].upper()} <= {slo[name]:g} ms"
        for name in ("ttft_ms", "tbt_ms", "tpot_ms")
        if slo[name] is not None
    ]
    return ", ".join(parts)


def _pairs(mapping: dict[str, int]) -> str:
    return ", ".join(f"{key}={value}" for key, value in mapping.items()) or "none"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.3f}%"


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
