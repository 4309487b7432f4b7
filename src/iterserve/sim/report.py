"""report.json for ``iterserve simulate`` (0x02 logical slot occupancy).

Slot occupancy counts (request, iteration) pairs that held work against
sequence_budget slots per iteration. It is a scheduling abstraction and is
labelled "not measured GPU utilization" wherever it appears (0x02).
"""

from __future__ import annotations

from typing import Any

from iterserve.engine.trace import RunTrace
from iterserve.records.spec import OnlineWorkload

OCCUPANCY_LABEL = "logical slot occupancy; not measured GPU utilization"


def simulate_report(workload: OnlineWorkload, policy_id: str, trace: RunTrace) -> dict[str, Any]:
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
    }
