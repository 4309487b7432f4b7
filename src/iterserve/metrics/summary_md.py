"""``report.md`` sections of a :class:`~iterserve.metrics.run_summary.RunSummary`:
what every run shows, SLO or not. Withheld percentiles print as ``n=6<20``,
never as a number. Labels are plain words for a reader who has not read the
spec, with the spec's term in parentheses so report.json's keys can be found."""

from __future__ import annotations

from typing import Any

from iterserve.metrics.percentiles import min_sample_size
from iterserve.metrics.run_summary import RunSummary

_LATENCY_ROWS = (("time to first token (TTFT)", "ttft"),
                 ("time between output tokens (TBT)", "tbt"),
                 ("mean time per output token after the first (TPOT)", "tpot"),
                 ("arrival to last token (end-to-end)", "end_to_end"),
                 ("arrival to first admission (queue time)", "queue"))
#: the first section a client-side report (``iterserve bench``) cannot observe
KV_HEADING = "## Preemptions and KV cache"
_THROUGHPUT_LABELS = {  # report.json key prefix: (plain words, the spec's term)
    "window": ("length of the observation window in", "window"),
    "offered_rate": ("arrivals", "offered rate"),
    "request_throughput": ("finished requests", "request throughput"),
    "emitted_token_throughput": ("output tokens", "emitted-token throughput"),
}


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
        "| arrived (offered) | finished (completed) | turned away (rejected) "
        "| cancelled by the client | not finished (unfinished) | output tokens (emitted) |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {counts.num_offered} | {counts.num_completed} | {counts.num_rejected} "
        f"| {counts.num_cancelled} | {counts.num_unfinished} | {counts.num_emitted_tokens} |",
        "",
        "## Throughput",
        "",
        *_pairs_table({_throughput_label(k): v for k, v in summary.throughput().items()}),
        "",
        f"## Latency ({unit.latency_name}; percentiles by nearest rank, shown only with "
        "enough samples: p50 n>=2, p95 n>=20, p99 n>=100)",
        "",
        "| measure | n | mean | p50 | p95 | p99 |",
        "|---|---:|---:|---:|---:|---:|",
        *_latency_lines(summary.latency()),
        "",
        KV_HEADING,
        "",
        *_pairs_table(_kv_rows(summary)),
        "",
        "## Capacity use over the whole run (counted from the plans; not measured GPU "
        "utilization)",
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
        "paused, KV cache dropped, rebuilt later (recompute preemptions)":
            summary.num_preemptions["recompute"],
        "paused, KV cache moved to host memory (swap preemptions)":
            summary.num_preemptions["swap"],
        "restarted after a pause (resumes)": summary.num_resumes,
    }
    kv = summary.kv
    if kv is None:
        rows["KV cache blocks"] = "unbounded (the workload declares no kv pool)"
    else:
        rows["KV cache blocks in the pool"] = kv.num_blocks_total
        rows["KV cache blocks in use at the peak"] = kv.peak_num_blocks_used
        rows["KV cache blocks in use, mean share (sampled at each decision)"] = (
            f"{100 * kv.mean_usage_fraction:.1f}%")
    return rows


def _capacity_rows(summary: RunSummary) -> dict[str, Any]:
    rows = {}
    for use in (summary.slot_occupancy, summary.batched_tokens_utilisation):
        if use is not None:
            fraction = use.fraction
            rows[use.label] = (f"{use.num_used}/{use.num_available} = "
                               + ("n/a" if fraction is None else f"{100 * fraction:.2f}%"))
    return rows


def _throughput_label(key: str) -> str:
    """``offered_rate_per_s`` -> ``arrivals per s (offered rate)``."""
    for name, (plain, term) in _THROUGHPUT_LABELS.items():
        if key.startswith(name + "_"):
            return f"{plain} {key[len(name) + 1:].replace('_', ' ')} ({term})"
    return key.replace("_", " ")


def _pairs_table(rows: dict[str, Any]) -> list[str]:
    return ["| figure | value |", "|---|---:|",
            *(f"| {name} | {_cell(value)} |" for name, value in rows.items())]


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
