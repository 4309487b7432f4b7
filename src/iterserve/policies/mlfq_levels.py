"""The queue of a skip-join MLFQ job, derived from its published frontiers
(0x09A, F54, F55; FastServe Algorithm 1 without its promotion step, which
``mlfq`` applies on top).

Queues 0 .. m-1 have quanta q_j = base * 2^j ms (F54). The queue is a
function of the view alone (no memory per request), so the job's completed
service is **replayed** as the iterations it would have run at the head of
its queue: its served prompt rows ``s`` (every prompt row once an output
exists; else the computed rows) in chunks of the token budget ``B`` from
row 0, the last chunk ending at ``s``, then one decode row for each output
after the first. A rebuild after a recompute preemption earns no service
(0x0C): it is not replayed and moves no queue. Over that replay:

- **skip-join** (F55): the job enters j_0 = min{j : q_j >= t_init}, where
  t_init is the predicted time of its first chunk, min(p, B) rows (the
  bottom queue when no quantum covers it);
- **spending**: a queue's quantum is spent by the replayed iterations the
  job completes in it: k consecutive iterations of equal predicted time t
  spend k * t (exactly that product, summed in replay order over the runs
  of equal times the queue holds). The iteration that brings the spend to
  q_j or more depletes the quantum; the excess is not carried (Algorithm 1
  demotes at the iteration boundary and the next queue starts afresh);
- **demotion** by the next-iteration-aware distance eta: a job that
  depletes q_p moves to min(p + eta, m-1) with p + eta the first queue
  below p whose quantum covers t_next, the predicted time of the iteration
  the job runs next (:meth:`Quanta.demotion_distance`). t_next is the
  replay's next iteration, and after the last one the job's own next
  service interval: min(p - s, B) prompt rows, or one decode row.

eta > 1 exactly when the next iteration's predicted time exceeds the
quantum of the queue below: the job skips the queues too small for it, as
skip-join does on entry. In a replay that is a decode row dearer than twice
the quantum the job depleted (a short prompt, dear decode rows). A prompt
chunk is never dearer than the first (cost models price fewer rows no
higher), which j_0's quantum covers, so from its skip-join queue a prefill
job moves one queue at a time; a larger distance for a prompt chunk needs
a job above its skip-join queue, which only promotion makes, and promotion
is not replayed (``mlfq`` puts a promoted job in Q_1 until its next output
and then back at this queue).

Cost: at most one depletion per queue, each found by one division over a
run of equal iterations, so O(m^2) per view whatever the output length.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from iterserve.records import frontier

#: (prefill rows, decode rows) -> predicted ms of one iteration running them
PredictMs = Callable[[int, int], float]


@dataclass(frozen=True, slots=True)
class Quanta:
    """m queues with geometric quanta q_j = base_ms * 2^j (0-based j, F54)."""

    base_ms: float
    num_queues: int

    @property
    def bottom(self) -> int:
        return self.num_queues - 1

    def quantum_ms(self, level: int) -> float:
        return self.base_ms * 2 ** level

    def first_covering(self, time_ms: float, start: int = 0) -> int:
        """The first queue from ``start`` whose quantum covers ``time_ms``
        (the bottom queue when none does)."""
        return next((level for level in range(start, self.bottom)
                     if self.quantum_ms(level) >= time_ms), self.bottom)

    def demotion_distance(self, level: int, next_iteration_ms: float) -> int:
        """eta >= 1: from ``level`` to the first lower queue whose quantum
        covers the next iteration (the bottom queue when none does; 1 at
        the bottom, where min(p + eta, m-1) stays put)."""
        return max(self.first_covering(next_iteration_ms, level + 1) - level, 1)


@dataclass(frozen=True, slots=True)
class ReplayPrices:
    """Predicted ms of a replay's iterations under one token budget."""

    predict_ms: PredictMs
    max_chunk_rows: int  # B, the run's token budget

    def chunk_ms(self, rows: int) -> float:
        return self.predict_ms(rows, 0)

    def decode_row_ms(self) -> float:
        return self.predict_ms(0, 1)


def replay(num_prompt: int, num_emitted: int, num_computed: int,
           prices: ReplayPrices) -> tuple[list[tuple[float, int]], float]:
    """The replayed service as runs ``(predicted ms, iterations)`` of equal
    consecutive iterations, and the predicted ms of the next service
    iteration after them (see the module docstring)."""
    served = num_prompt if num_emitted else min(num_computed, num_prompt)
    budget = prices.max_chunk_rows
    full_chunks, last_rows = divmod(served, budget)
    runs: list[tuple[float, int]] = []
    if full_chunks:
        _append(runs, prices.chunk_ms(budget), full_chunks)
    if last_rows:
        _append(runs, prices.chunk_ms(last_rows), 1)
    num_decodes = frontier.num_decode_rows_done(num_emitted)
    if num_decodes:
        _append(runs, prices.decode_row_ms(), num_decodes)
    if served < num_prompt:
        return runs, prices.chunk_ms(min(num_prompt - served, budget))
    return runs, prices.decode_row_ms()


def _append(runs: list[tuple[float, int]], time_ms: float, count: int) -> None:
    if runs and runs[-1][0] == time_ms:
        runs[-1] = (time_ms, runs[-1][1] + count)
    else:
        runs.append((time_ms, count))


def attained_level(num_prompt: int, num_emitted: int, num_computed: int, quanta: Quanta,
                   prices: ReplayPrices) -> int:
    """The queue a job reaches by skip-join and next-iteration-aware
    demotion over its replayed service (no promotion)."""
    level = quanta.first_covering(prices.chunk_ms(min(num_prompt, prices.max_chunk_rows)))
    if level >= quanta.bottom:
        return quanta.bottom
    runs, after_ms = replay(num_prompt, num_emitted, num_computed, prices)
    spent_ms = 0.0
    for index, (time_ms, count) in enumerate(runs):
        following_ms = runs[index + 1][0] if index + 1 < len(runs) else after_ms
        while count and level < quanta.bottom:
            needed = iterations_to_deplete(quanta.quantum_ms(level), spent_ms, time_ms)
            if needed is None or needed > count:
                spent_ms += count * time_ms
                break
            count -= needed
            next_ms = time_ms if count else following_ms
            level = min(level + quanta.demotion_distance(level, next_ms), quanta.bottom)
            spent_ms = 0.0
        if level >= quanta.bottom:
            return quanta.bottom
    return level


def iterations_to_deplete(quantum_ms: float, spent_ms: float, time_ms: float) -> int | None:
    """The fewest k >= 1 iterations of ``time_ms`` with
    ``spent_ms + k * time_ms >= quantum_ms`` (None when iterations cost
    nothing): the division's estimate, corrected to that very comparison."""
    if time_ms <= 0:
        return None
    count = max(1, math.ceil((quantum_ms - spent_ms) / time_ms))
    while count > 1 and spent_ms + (count - 1) * time_ms >= quantum_ms:
        count -= 1
    while spent_ms + count * time_ms < quantum_ms:
        count += 1
    return count
