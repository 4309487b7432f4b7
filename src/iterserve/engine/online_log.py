"""The decision log of an online run, streamed as the run goes.

An online engine learns its requests as they arrive. Its log's header holds
the workload the engine was made with (capacity, kv, no requests); each
batch of requests the engine takes in is an ``arrival`` line
(:func:`arrival_line`), written before the step that can publish them and
stamped with the state version it was taken in at, so replay declares it at
the same point of the run. Every line is chained to the one before it, so
nothing is rewritten at the end: lines go to the sink as they are made and
the engine keeps no request's record once its line is written. (A log
written before arrival lines existed holds every request in its header; it
replays as it always has.)

Encoding a line (the state digest, the plan and the result) is not on the
step path: the observer only queues the step's immutable records, in order
with declarations, rejections and cancellations, and
:meth:`OnlineDecisionLog.flush` encodes them, the same lines in the same
order, when the engine is idle, when the log is read or closed, or when more
than ``max_queued`` facts wait (a busy engine's queue stays bounded).
"""

from __future__ import annotations

import copy
import dataclasses
import io
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from iterserve.engine.decision_log import DecisionLogWriter, GateRecord
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.spec import OnlineWorkload, RequestSpec
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.records.workload import online_to_json


@dataclass(frozen=True, slots=True)
class OnlineLogs:
    """Where an online engine's logs go. A sink (an open text stream) gets
    its log line by line as the run goes; a log without one is kept in
    memory when ``keep_in_memory`` (the offline API and tests read it back:
    ``OnlineEngine.decision_log``, ``OnlineEngine.events``), else not kept
    at all (a server: its memory is bounded by what is live)."""

    decision_log: IO[str] | None = None
    event_log: IO[str] | None = None
    keep_in_memory: bool = True


ARRIVAL = "arrival"  # the line kind of requests declared while the engine runs
DEFAULT_MAX_QUEUED_FACTS = 256

_Deferred = tuple[Callable[..., None], tuple[Any, ...]]


def arrival_line(workload: OnlineWorkload, specs: Sequence[RequestSpec],
                 state: SchedulerState) -> dict[str, Any]:
    """Requests declared at ``state`` (between two steps), in declaration
    order, encoded as the header's workload encodes requests."""
    requests = online_to_json(dataclasses.replace(workload, requests=tuple(specs)))["requests"]
    return {"type": ARRIVAL, "decision_id": state.decision_id,
            "state_version": state.state_version, "requests": requests}


class _Redirect:
    """The writer's stream: the sink, or for a moment another text buffer
    (the summary of :meth:`OnlineDecisionLog.text`, written by a copy)."""

    def __init__(self, sink: IO[str]) -> None:
        self.sink = sink
        self.target: IO[str] = sink

    def write(self, text: str) -> int:
        return self.target.write(text)


class OnlineDecisionLog(DecisionLogWriter):
    """A decision-log observer that streams an online run's log to ``sink``
    (an open text stream: a file, a rotating file, or a ``StringIO`` read
    back with :meth:`text`). Facts are queued and encoded by :meth:`flush`."""

    def __init__(self, sink: IO[str], workload: OnlineWorkload, capacity: CapacityFacts, *,
                 gate: GateRecord | None, policy_settings: Mapping[str, Any], executor: str,
                 max_queued: int = DEFAULT_MAX_QUEUED_FACTS) -> None:
        if max_queued < 1:
            raise ValueError(f"max_queued must be >= 1, got {max_queued}")
        self._workload = workload
        self._out = _Redirect(sink)
        self._pending: deque[_Deferred] = deque()  # observed, not yet encoded
        self._queue_lock = threading.Lock()  # guards _pending, held only to append or pop
        self._encode_lock = threading.Lock()  # one encoder at a time: the lines and the chain
        self.max_queued = max_queued
        super().__init__(self._out, workload, capacity,  # type: ignore[arg-type]
                         gate=gate, policy_settings=policy_settings, executor=executor)

    @property
    def num_queued(self) -> int:
        """Facts observed and not yet encoded."""
        return len(self._pending)

    @property
    def is_backlogged(self) -> bool:
        return len(self._pending) >= self.max_queued

    # -- the engine thread: queue the facts ---------------------------------------------
    def on_declare(self, specs: Sequence[RequestSpec], state: SchedulerState) -> None:
        """Requests the engine takes in at ``state``, before its next step."""
        if specs:
            self._defer(OnlineDecisionLog._write_arrival, tuple(specs), state)

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

    def _write_arrival(self, specs: tuple[RequestSpec, ...], state: SchedulerState) -> None:
        self._write(arrival_line(self._workload, specs, state))

    # -- any thread: encode them ------------------------------------------------------
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

    def text(self, state: SchedulerState, *, is_done: bool) -> str:
        """The log so far, when the sink is a ``StringIO``: every line, and
        the summary line :meth:`close` would write now (not kept: the log
        goes on)."""
        sink = self._out.sink
        if not isinstance(sink, io.StringIO):
            raise ValueError("the decision log streams to its sink; read it there")
        with self._encode_lock:
            self._encode_pending()
            summary = io.StringIO()
            self._out.target = summary
            try:  # a copy ends the log: this writer's chain goes on unchanged
                DecisionLogWriter.close(copy.copy(self), state, is_done=is_done)
            finally:
                self._out.target = sink
            return sink.getvalue() + summary.getvalue()

    def close(self, state: SchedulerState, *, is_done: bool = True) -> None:
        """Encode what is queued and end the log (a summary line when the
        run is not done or rejections are unwritten); the sink stays open."""
        with self._encode_lock:
            self._encode_pending()
            super().close(state, is_done=is_done)
