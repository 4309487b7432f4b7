"""StreamPublisher: engine facts -> per-request stream events and outcomes.

An engine observer on the engine thread. Emitted tokens become
:class:`StreamEvent` batches (token ids, visible text delta, logprobs,
engine-clock times); a request that becomes terminal gets one final event,
its executor stream is dropped and its outcome counted. Outcomes partition
the submitted requests (0x07): finished (stop | length), cancelled (by the
client), rejected (overload contract or policy, before admission), aborted
(by the engine: shutdown, an engine error, preemption mode ABORT).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any, Protocol

from iterserve.engine.observer import EngineObserver
from iterserve.engine.streams import StreamEvent, StreamSink
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.spec import RequestSpec
from iterserve.records.state import SchedulerState
from iterserve.records.time_units import ms_to_s
from iterserve.records.view import FinishReason

OUTCOMES = ("finished", "cancelled", "rejected", "aborted")
_OUTCOME = {FinishReason.STOP: "finished", FinishReason.LENGTH: "finished",
            FinishReason.CANCELLED: "cancelled", FinishReason.REJECTED: "rejected",
            FinishReason.ABORT: "aborted"}


class OutputSource(Protocol):
    """What the executor keeps per request (``TorchExecutor.streams``)."""

    @property
    def text(self) -> str: ...

    @property
    def logprobs(self) -> Sequence[float]: ...

    @property
    def alternatives(self) -> Sequence[tuple[tuple[int, float], ...]]:
        """One entry per output token when its params ask for top logprobs, else empty."""

    @property
    def prompt_logprobs(self) -> Sequence[tuple[float, tuple[tuple[int, float], ...]]]:
        """(logprob, alternatives) of prompt tokens 1.., when its params ask; else empty."""


class StreamPublisher(EngineObserver):
    """Routes engine facts to the sinks registered by the online front."""

    def __init__(self, sources: MutableMapping[str, Any],  # request id -> OutputSource
                 ms_per_clock_unit: float = 1.0) -> None:
        self._sources = sources  # the executor's per-request outputs; dropped at the end
        self._s_per_unit = ms_to_s(ms_per_clock_unit)
        self._sinks: dict[str, StreamSink] = {}
        self._clients: dict[str, str] = {}
        self._num_chars: dict[str, int] = {}
        self.end_reasons: dict[str, str] = {}  # why the front cancels: cancelled | aborted
        self._lock = threading.Lock()
        self._outcomes: Counter[tuple[str, str]] = Counter()  # (outcome, client_id)
        #: called on the engine thread as each request ends, with (request id,
        #: outcome, finish reason, client id): metrics count outcomes as they happen
        self.outcome_listeners: list[Callable[[str, str, str, str], None]] = []

    def register(self, spec: RequestSpec, sink: StreamSink) -> None:
        self._sinks[spec.request_id] = sink
        self._clients[spec.request_id] = spec.client_id
        self._num_chars[spec.request_id] = 0

    def is_open(self, request_id: str) -> bool:
        """Registered and not yet ended (engine thread)."""
        return request_id in self._sinks

    def outcomes(self) -> Mapping[tuple[str, str], int]:
        """A copy of the outcome counts by (outcome, client id); any thread."""
        with self._lock:
            return dict(self._outcomes)

    def on_arrival(self, spec: RequestSpec, now: float) -> None:
        self._put(spec.request_id, StreamEvent(spec.request_id, is_accepted=True))

    def on_reject(self, spec: RequestSpec, reason: str, now: float) -> None:
        self._end(spec.request_id, "rejected", "rejected", reason)

    def on_cancel(self, request_id: str, state: SchedulerState, successor: SchedulerState) -> None:
        reason = self.end_reasons.pop(request_id, "cancelled")
        outcome = "aborted" if reason != "cancelled" else "cancelled"
        self._end(request_id, outcome, outcome, None if outcome == "cancelled" else reason)

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        time_s = successor.now * self._s_per_unit
        for item in result.completed:
            if item.emitted and item.token_id is not None:
                self._token(item.request_id, item.token_id, time_s)
        touched = {item.request_id for item in plan.work}
        touched.update(intent.request_id for intent in plan.intents)
        for request_id in sorted(touched):
            view = successor.views[request_id]
            if view.is_terminal and request_id in self._sinks:
                reason = view.finish_reason or FinishReason.ABORT
                outcome = _OUTCOME[reason]
                self._end(request_id, outcome, "aborted" if reason is FinishReason.ABORT
                          else reason.value, None)

    def _token(self, request_id: str, token_id: int, time_s: float) -> None:
        source = self._sources[request_id]
        text = source.text
        delta = text[self._num_chars.get(request_id, 0):]
        self._num_chars[request_id] = len(text)
        alternatives = source.alternatives
        top = (alternatives[-1],) if alternatives else ()
        logprobs = source.logprobs
        prompt = tuple(source.prompt_logprobs) if len(logprobs) == 1 else ()
        self._put(request_id, StreamEvent(request_id, (token_id,), delta, (logprobs[-1],),
                                          (time_s,), top_logprobs=top, prompt_logprobs=prompt))

    def _end(self, request_id: str, outcome: str, finish_reason: str, reason: str | None) -> None:
        source = self._sources.pop(request_id, None)
        text = "" if source is None else source.text
        delta = text[self._num_chars.pop(request_id, 0):]
        sink = self._sinks.pop(request_id, None)
        client = self._clients.pop(request_id, "anonymous")
        with self._lock:
            self._outcomes[(outcome, client)] += 1
        for listener in self.outcome_listeners:
            listener(request_id, outcome, finish_reason, client)
        if sink is not None:
            sink.put([StreamEvent(request_id, text=delta, finish_reason=finish_reason,
                                  reason=reason)])

    def _put(self, request_id: str, event: StreamEvent) -> None:
        sink = self._sinks.get(request_id)
        if sink is not None:
            sink.put([event])
