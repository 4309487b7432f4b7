"""The periodic stats line, like vLLM's: prompt and generation throughput
over the last interval, the queues and the KV usage, every
``--stats-interval-s`` while the engine is busy; nothing while it is idle.

The numbers come from the metrics snapshot the engine publishes after each
step (:mod:`iterserve.server.metrics_observer`), so the line and a scrape
agree.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from iterserve.records.state import blocks_used_of_total
from iterserve.server.metrics_observer import MetricsSnapshot

logger = logging.getLogger("iterserve.stats")


class StatsLine:
    """Turns successive snapshots into lines; ``clock`` is seconds."""

    def __init__(self, snapshot: Callable[[], MetricsSnapshot],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._snapshot = snapshot
        self._clock = clock
        first = snapshot()
        self._last_s = clock()
        self._last_prompt = first.count("vllm:prompt_tokens")
        self._last_generation = first.count("vllm:generation_tokens")

    def line(self) -> str | None:
        """The line for the interval since the previous call; None when idle
        (no tokens in the interval and no request live)."""
        snapshot = self._snapshot()
        now_s = self._clock()
        prompt = snapshot.count("vllm:prompt_tokens")
        generation = snapshot.count("vllm:generation_tokens")
        elapsed_s = max(now_s - self._last_s, 1e-9)
        num_prompt, num_generation = prompt - self._last_prompt, generation - self._last_generation
        self._last_s, self._last_prompt, self._last_generation = now_s, prompt, generation
        state = snapshot.state
        if not (num_prompt or num_generation or state.has_live):
            return None
        used, total = blocks_used_of_total(state.capacity)
        usage_pct = 100.0 * used / total if total else 0.0
        return (f"Avg prompt throughput: {num_prompt / elapsed_s:.1f} tokens/s, "
                f"Avg generation throughput: {num_generation / elapsed_s:.1f} tokens/s, "
                f"Running: {len(state.running)} reqs, Waiting: {len(state.waiting)} reqs, "
                f"Swapped: {len(state.suspended)} reqs, KV cache usage: {usage_pct:.1f}%")


async def log_stats(stats: StatsLine, interval_s: float) -> None:
    """Log ``stats``' line every ``interval_s`` until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        line = stats.line()
        if line is not None:
            logger.info(line)
