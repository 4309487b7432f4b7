"""Documented size limits of a workload (docs/workloads.md, "Limits").

A value past a limit is refused when the workload is loaded, with a one-line
error naming the field and the limit, instead of running the simulator out of
memory or time. The limits are far above any workload the simulator or a real
model run can serve on one machine.
"""

from __future__ import annotations

MAX_REQUESTS = 100_000
MAX_PROMPT_TOKENS = 1 << 20  # 1,048,576 tokens per prompt
MAX_OUTPUT_TOKENS = 1 << 20
MAX_ARRIVAL = 1e9  # clock units (iterations or ms)
MAX_BUDGET = 1 << 20  # max_num_batched_tokens, max_num_seqs and the capacity knobs
MAX_KV_ROWS = 1 << 32
MAX_NUM_BLOCKS = 1 << 20  # device and host pools
MAX_BLOCK_SIZE = 4096
MAX_BYTES_PER_ROW = 1 << 30
MAX_WATERMARK_ROWS = 1 << 32
MAX_PRIORITY = (1 << 31) - 1
MAX_SLO_MS = 1e12
MAX_SERVICE_WEIGHT = 1e6  # fairness w_p, w_q and client weights (0x09A)
MAX_DECISION_ID = 1 << 40  # injected failures name a decision of the run
MAX_EXTENSION_WAIT_ITERATIONS = 1 << 20  # kv.extension_wait_max_iterations (0x06)
