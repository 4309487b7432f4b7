"""report.json for ``iterserve simulate`` (0x02 logical slot occupancy).

Slot occupancy counts (request, iteration) pairs that held work against
sequence_budget slots per iteration. It is a scheduling abstraction and is
labelled "not measured GPU utilization" wherever it appears (0x02).
"""

from __future__ import annotations

from typing import Any

from iterserve.engine.trace import RunTrace
from iterserve.metrics.chunk_ledger import PROXY_LABEL, ledger_from_starts
from iterserve.records.spec import OnlineWorkload

OCCUPANCY_LABEL = "logical slot occupancy; not measured GPU utilization"


def chunk_ledger_report(workload: OnlineWorkload, trace: RunTrace,
                        bytes_per_row: int | None) -> dict[str, Any]:
    """Per-request and per-run 0x09 ledgers over completed prefills."""
    per_request: dict[str, dict[str, Any]] = {}
    for spec in workload.requests:
        starts = trace.prefill_chunk_starts.get(spec.request_id)
        record = trace.requests.get(spec.request_id)
        if not starts or record is None or record.first_token_time is None:
            continue
        ledger = ledger_from_starts(starts, spec.num_prompt_tokens, bytes_per_row)
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
    available = workload.capacity.sequence_budget * iterations
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
