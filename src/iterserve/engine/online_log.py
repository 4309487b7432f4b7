"""The decision log of an online run.

An online engine learns its requests as they arrive, but the log's header
holds the whole workload and every line is chained to the one before it
(formats 3 and 4). So the body lines are kept, in order, as the ordinary
:class:`DecisionLogWriter` makes them (rejections attached, same fields);
:meth:`BufferedDecisionLog.text` then writes the header with the workload
declared so far and chains the kept lines after it. ``iterserve replay``
reads the result like any other log.

Encoding a line (the state digest, the plan and the result) is not on the
step path: the observer only queues the step's
immutable records, in order with rejections and cancellations, and
:meth:`BufferedDecisionLog.flush` encodes them, the same lines in the same
order, when the engine is idle or the log is read.
"""

from __future__ import annotations

import io
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from iterserve.engine.decision_log import DecisionLogWriter, GateRecord
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.spec import OnlineWorkload, RequestSpec
from iterserve.records.state import CapacityFacts, SchedulerState

_Deferred = tuple[Callable[..., None], tuple[Any, ...]]


class BufferedDecisionLog(DecisionLogWriter):
    """A decision-log observer whose lines wait for the final header."""

    def __init__(self, workload: OnlineWorkload, capacity: CapacityFacts, *,
                 gate: GateRecord | None, policy_settings: Mapping[str, Any],
                 executor: str) -> None:
        self._lines: list[dict[str, Any]] = []
        self._pending: deque[_Deferred] = deque()  # observed, not yet encoded
        self._queue_lock = threading.Lock()  # guards _pending, held only to append or pop
        self._encode_lock = threading.Lock()  # one encoder at a time: the lines and the chain
        self._capacity = capacity
        self._header: dict[str, Any] = {"gate": gate, "policy_settings": policy_settings,
                                        "executor": executor}
        super().__init__(io.StringIO(), workload, capacity, **self._header)
        self._lines.clear()  # the provisional header

    def _write(self, line: dict[str, Any]) -> None:
        if self._rejected:
            line["rejected"] = self._rejected
            self._rejected = []
        self._lines.append(line)

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        self._defer(DecisionLogWriter.on_step, state, plan, result, successor)

    def on_reject(self, spec: RequestSpec, reason: str, now: float) -> None:
        self._defer(DecisionLogWriter.on_reject, spec, reason, now)

    def on_cancel(self, request_id: str, state: SchedulerState,
                  successor: SchedulerState) -> None:
        self._defer(DecisionLogWriter.on_cancel, request_id, state, successor)

    def _defer(self, method: Callable[..., None], *args: Any) -> None:
        with self._queue_lock:
            self._pending.append((method, args))

    def flush(self, max_facts: int | None = None) -> bool:
        """Encode queued facts into their lines, in order, at most
        ``max_facts`` of them (any thread; the engine thread keeps queueing
        meanwhile). True when some remain queued."""
        with self._encode_lock:
            return self._encode_pending(max_facts)

    def _encode_pending(self, max_facts: int | None = None) -> bool:
        num_encoded = 0
        while max_facts is None or num_encoded < max_facts:
            with self._queue_lock:
                if not self._pending:
                    return False
                method, args = self._pending.popleft()
            method(self, *args)
            num_encoded += 1
        return bool(self._pending)

    def text(self, workload: OnlineWorkload, state: SchedulerState, *, is_done: bool) -> str:
        """The log so far: the header with ``workload``, the kept lines
        chained after it, and a summary line when the run is not done (or
        rejections are not yet written). Keeps nothing it writes."""
        with self._encode_lock:
            self._encode_pending()
            return self._text(workload, state, is_done=is_done)

    def _text(self, workload: OnlineWorkload, state: SchedulerState, *, is_done: bool) -> str:
        out = io.StringIO()
        writer = DecisionLogWriter(out, workload, self._capacity, **self._header)
        for line in self._lines:
            DecisionLogWriter._write(writer, dict(line))
        writer._rejected = list(self._rejected)  # the trailing rejections, for the summary
        writer.close(state, is_done=is_done)
        return out.getvalue()
