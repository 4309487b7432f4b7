"""The coordinates a ``simulate`` report carries (0x0E R registry) and the
result records a report yields.

``run_coordinates`` is computed once per run by the CLI (it reads the
workload file and asks git for a description); ``report_results`` turns a
report's summary and SLO evaluation into values, each with its metric,
unit, denominator and percentile. ``records_of_report`` joins both into
:class:`~iterserve.lab.coordinates.ResultRecord` rows for ``compare``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from iterserve.lab.coordinates import CoordinateError, ResultRecord
from iterserve.records.canonical_json import canonical_json
from iterserve.records.spec import OnlineWorkload

COORDINATES_SCHEMA = "iterserve.lab.coordinates/v1"
_LATENCIES = ("ttft", "tbt", "tpot", "end_to_end", "queue")
_PERCENTILES = ("p50", "p95", "p99")


def source_version() -> str:
    """``iterserve X.Y.Z`` plus ``git describe`` of the source tree when it
    is a git checkout (no git, or not a checkout: the version alone)."""
    text = f"iterserve {metadata.version('iterserve')}"
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"], cwd=Path(__file__).parent,
            capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return text
    return f"{text} ({described})" if described else text


def sha256_of(obj: object) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


def run_coordinates(workload_path: Path, online: OnlineWorkload, cost_model_spec: str,
                    cost_model_id: str, slo: dict[str, float | None] | None) -> dict[str, Any]:
    """The run-level coordinates of a simulated run: the workload is named
    by the sha256 of its file's canonical JSON, the arrivals by the sha256
    of the (request, arrival) list; the model is the cost profile (no
    weights run); threads do not apply to a virtual clock."""
    return {
        "schema": COORDINATES_SCHEMA,
        "source_version": source_version(),
        "source_location": f"iterserve simulate --workload {workload_path.name}",
        "model": f"no weights (simulated executor); cost profile {cost_model_id}",
        "hardware": f"simulated executor, cost model {cost_model_spec}",
        "threads": None,
        **workload_coordinates(workload_path, online),
        "baseline": "none (absolute values)",
        "slo": None if slo is None else canonical_json(slo),
        "evidence_class": "simulated",
    }


def workload_coordinates(workload_path: Path, online: OnlineWorkload,
                         time_scale: float = 1.0) -> dict[str, str]:
    """``workload`` (sha256 of the file's canonical JSON), ``arrivals``
    (sha256 of the (request, arrival) list, on the workload's clock) and
    ``load``: a replay that scales time (``bench --time-scale``) offers other
    arrivals and another load, and says so in both."""
    document = _read_json(workload_path)
    times = [r.arrival if time_scale == 1.0 else r.arrival * time_scale
             for r in online.requests]
    arrivals = [[r.request_id, t] for r, t in zip(online.requests, times, strict=True)]
    span = max(times) - min(times) if times else 0
    return {
        "workload": f"sha256:{sha256_of(document)}",
        "arrivals": f"sha256:{sha256_of(arrivals)}",
        "load": f"{len(times)} requests over {span} {online.clock} units",
    }


def _read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def report_results(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Values from a report's summary (latency percentiles and means,
    throughput) and SLO evaluation (offered-load attainment)."""
    summary = report.get("summary")
    if summary is None:
        return []
    out: list[dict[str, Any]] = []
    latency_unit = "iterations" if summary["time_unit"] == "iteration" else "ms"
    latency = summary[f"latency_{latency_unit}"]
    for name in _LATENCIES:
        stats = latency.get(name)
        if stats is None:
            continue
        denominator = f"{'tokens' if name in ('tbt', 'tpot') else 'requests'} completed in window"
        for pct in _PERCENTILES:
            value = stats[pct].get("value") if stats[pct]["status"] == "ok" else None
            out.append(_result(name, latency_unit, denominator, pct, value, False))
        out.append(_result(name, latency_unit, denominator, "mean", stats["mean"], False))
    rate_unit = "per iteration" if summary["time_unit"] == "iteration" else "per s"
    for key, value in sorted(summary["throughput"].items()):
        if key.startswith(("emitted_token", "request_throughput")):
            metric = key.rsplit("_per_", 1)[0]
            out.append(_result(metric, rate_unit, "observation window", None, value, True))
    metrics = report.get("metrics")
    if metrics is not None:
        out.append(_result("slo_attainment", "fraction", "offered requests in window", None,
                           metrics["attainment"]["offered_load"], True))
    return out


def _result(metric: str, unit: str, denominator: str, percentile: str | None,
            value: float | None, higher_is_better: bool) -> dict[str, Any]:
    return {"metric": metric, "unit": unit, "denominator": denominator,
            "percentile": percentile, "value": value, "higher_is_better": higher_is_better}


def records_of_report(report: Any, label: str, where: str) -> list[ResultRecord]:
    """Every value of a report.json joined with its run's coordinates."""
    if not isinstance(report, dict) or not isinstance(report.get("coordinates"), dict):
        raise CoordinateError(f"{where}: report has no coordinates (re-run iterserve simulate)")
    coords = {k: v for k, v in report["coordinates"].items() if k != "schema"}
    results = report.get("results")
    if not isinstance(results, list):
        raise CoordinateError(f"{where}: report has no results list")
    return [ResultRecord.from_json({**coords, **result, "label": label}, where)
            for result in results]
