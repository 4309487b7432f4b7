"""The ``kv`` section of a run report (0x05, 0x0C): preemptions by mode,
recompute overhead, swapped bytes and prefix-cache hits, from the executor's
KV residency counters and the run trace. Bytes use the run's logical bytes
per row (a declared ABI figure, not measured traffic)."""

from __future__ import annotations

from typing import Any

from iterserve.engine.kv_residency import KvResidency
from iterserve.engine.trace import RunTrace
from iterserve.records.plan import preempt_intent_kind
from iterserve.records.preemption import KV_PREEMPTION_MODES


def kv_report(kv: KvResidency | None, trace: RunTrace,
              bytes_per_row: int | None) -> dict[str, Any] | None:
    if kv is None:
        return None
    stats = kv.stats()
    facts = kv.facts()
    block_bytes = None if bytes_per_row is None else bytes_per_row * facts.block_size
    rebuild_rows = sum(record.num_rebuild_rows for record in trace.iterations)

    def as_bytes(num_blocks: int) -> int | None:
        return None if block_bytes is None else num_blocks * block_bytes

    return {
        "block_size": facts.block_size,
        "num_blocks_total": facts.num_blocks_total,
        "bytes_per_row": bytes_per_row,
        "preemptions": {
            **{mode.value: stats.intents.get(preempt_intent_kind(mode).value, 0)
               for mode in KV_PREEMPTION_MODES},
            "reason": "kv_exhausted",
        },
        "resumes": stats.intents.get("resume", 0),
        "recompute_overhead_tokens": rebuild_rows,
        "swapped_out_blocks": stats.num_swapped_out_blocks,
        "swapped_in_blocks": stats.num_swapped_in_blocks,
        "swapped_out_bytes": as_bytes(stats.num_swapped_out_blocks),
        "swapped_in_bytes": as_bytes(stats.num_swapped_in_blocks),
        "prefix_cache_hit_tokens": stats.num_prefix_hit_tokens,
        # hits published before planning (0x0E): prefill rows never planned
        "prefill_rows_saved": stats.num_planned_hit_rows,
        "failed_allocations": stats.num_failed_allocations,
        "label": "logical KV accounting; bytes are ABI figures, not measured traffic",
    }
