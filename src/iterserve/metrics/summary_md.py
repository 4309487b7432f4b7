"""``report.md`` sections of a :class:`~iterserve.metrics.run_summary.RunSummary`:
what every run shows, SLO or not. Withheld percentiles print as ``n=6<20``,
never as a number."""

from __future__ import annotations

from typing import Any

from iterserve.metrics.percentiles import min_sample_size
from iterserve.metrics.run_summary import RunSummary

_LATENCY_ROWS = (("TTFT", "ttft"), ("TBT", "tbt"), ("TPOT", "tpot"),
                 ("end-to-end", "end_to_end"), ("queue time", "queue"))


def render_summary(summary: RunSummary) -> list[str]:
    unit = summary.unit
    counts = summary.counts
    start, end = (unit.from_s(summary.window.start_s), unit.from_s(summary.window.end_s))
    window = (f"Window [{start:g}, {end:g}) iterations; iteration clock: times in iterations "
              f"(1 iteration = {unit.seconds_per_unit:g} s of the fixed cost model)"
              if unit.is_iterations else f"Window [{start:g} s, {end:g} s); times in seconds")
    lines = [
        f"{window}.",
        "",
        "## Requests",
        "",
        "| offered | completed | rejected | cancelled | unfinished | emitted tokens |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {counts.num_offered} | {counts.num_completed} | {counts.num_rejected} "
        f"| {counts.num_cancelled} | {counts.num_unfinished} | {counts.num_emitted_tokens} |",
        "",
        "## Throughput",
        "",
        *_pairs_table({k.replace("_", " "): v for k, v in summary.throughput().items()}),
        "",
        f"## Latency ({unit.latency_name}; nearest rank, gated p50 n>=2, p95 n>=20, p99 n>=100)",
        "",
        "| clock | n | mean | p50 | p95 | p99 |",
        "|---|---:|---:|---:|---:|---:|",
        *_latency_lines(summary.latency()),
        "",
        "## Preemptions and KV",
        "",
        *_pairs_table(_kv_rows(summary)),
        "",
        "## Capacity use over the whole run (logical; not measured GPU utilization)",
        "",
        *_pairs_table(_capacity_rows(summary)),
    ]
    return lines


def _latency_lines(latency: dict[str, Any]) -> list[str]:
    lines = []
    for name, key in _LATENCY_ROWS:
        entry = latency[key]
        cells = [_cell(entry["mean"])] + [_gated(entry[p], p) for p in ("p50", "p95", "p99")]
        lines.append(f"| {name} | {entry['n']} | " + " | ".join(cells) + " |")
    return lines


def _gated(value: dict[str, Any], key: str) -> str:
    if value["status"] == "ok":
        return _cell(value["value"])
    return f"n={value['n']}<{min_sample_size(float(key[1:]))}"


def _kv_rows(summary: RunSummary) -> dict[str, Any]:
    rows: dict[str, Any] = {
        "preemptions (recompute)": summary.num_preemptions["recompute"],
        "preemptions (swap)": summary.num_preemptions["swap"],
        "resumes": summary.num_resumes,
    }
    kv = summary.kv
    if kv is None:
        rows["KV blocks"] = "unbounded (no kv pool declared)"
    else:
        rows["KV blocks total"] = kv.num_blocks_total
        rows["KV blocks peak used"] = kv.peak_num_blocks_used
        rows["KV block usage mean (sampled at decisions)"] = f"{100 * kv.mean_usage_fraction:.1f}%"
    return rows


def _capacity_rows(summary: RunSummary) -> dict[str, Any]:
    rows = {}
    for use in (summary.slot_occupancy, summary.batched_tokens_utilisation):
        if use is not None:
            fraction = use.fraction
            rows[use.label] = (f"{use.num_used}/{use.num_available} = "
                               + ("n/a" if fraction is None else f"{100 * fraction:.2f}%"))
    return rows


def _pairs_table(rows: dict[str, Any]) -> list[str]:
    return ["| figure | value |", "|---|---:|",
            *(f"| {name} | {_cell(value)} |" for name, value in rows.items())]


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
