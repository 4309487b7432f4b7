"""Per-request timelines: the event log grouped by request and checked.

A :class:`RequestTimeline` is every observed fact about one request, in clock
order. :class:`SortedTimelines` enforces the lifecycle contract that the
clocks and outcome partition of 0x07 rely on:

- the first event of a request is its one arrival (the TTFT origin);
- at most one admission; a rejection only before admission or any output;
- ``first_token`` once, then ``token`` indices 1, 2, ... consecutively;
- ``preempt`` only while live, ``resume`` only while preempted (0x0C);
- ``not_ready`` only while ready, ``ready`` only while not ready (a
  request arrives ready; before or after admission: foreign readiness,
  0x0C), and no emission, schedule or compute while not ready;
- one terminal fact at most (finish, reject or cancel), nothing after it;
- a finish names the number of outputs actually emitted, which is >= 1.

A *compact* timeline (``SortedTimelines(compact=True)``, the streaming
report of a long run) holds its emission times in an
``array('d')``: 8 bytes a token instead of a float object and its pointer.
Every reader indexes, measures and iterates ``emission_s`` only, so both
kinds read alike.

Admission may be implied: a producer that cannot observe admission (the bench
client) emits no ``admit``; a request that emitted or finished was admitted,
with an unknown admission time.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import repeat
from typing import Any, cast

from iterserve.metrics.events import (
    AdmitEvent,
    ArrivalEvent,
    CancelEvent,
    ComputeEvent,
    Event,
    EventLogError,
    FinishEvent,
    FirstTokenEvent,
    NotReadyEvent,
    PreemptEvent,
    ReadyEvent,
    RejectEvent,
    ResumeEvent,
    ScheduleEvent,
    TokenEvent,
)


@dataclass(frozen=True, slots=True)
class RequestTimeline:
    """Observed facts of one request. ``emission_s[j]`` is output j's time
    (y_{r,j}): a tuple, or a float64 ``array('d')`` in a compact timeline."""

    request_id: str
    client_id: str
    arrival_s: float
    num_prompt_tokens: int | None = None
    admit_s: float | None = None
    reject_s: float | None = None
    reject_reason: str | None = None
    emission_s: tuple[float, ...] | array[float] = ()
    finish_s: float | None = None
    finish_reason: str | None = None
    cancel_s: float | None = None
    cancel_reason: str | None = None
    preempt_s: tuple[float, ...] = ()
    resume_s: tuple[float, ...] = ()
    compute_s: tuple[tuple[float, int], ...] = ()  # (time, prompt rows), rebuild excluded
    num_rebuild_rows: int = 0
    not_ready_s: tuple[float, ...] = ()  # blocked on foreign readiness from each
    ready_s: tuple[float, ...] = ()  # ready again at each (one fewer while blocked)

    @property
    def is_admitted(self) -> bool:
        return self.admit_s is not None or bool(self.emission_s) or self.finish_s is not None

    @property
    def is_finished(self) -> bool:
        return self.finish_s is not None

    @property
    def is_rejected(self) -> bool:
        return self.reject_s is not None

    @property
    def is_cancelled(self) -> bool:
        return self.cancel_s is not None

    @property
    def is_preempted(self) -> bool:
        return len(self.preempt_s) > len(self.resume_s)

    @property
    def is_blocked(self) -> bool:
        """Blocked on foreign readiness at its last fact."""
        return len(self.not_ready_s) > len(self.ready_s)

    @property
    def is_terminal(self) -> bool:
        # the fields, not is_finished/is_rejected/is_cancelled: asked once per token
        return self.finish_s is not None or self.reject_s is not None or self.cancel_s is not None

    @property
    def num_output_tokens(self) -> int:
        return len(self.emission_s)


@dataclass(slots=True)
class _Builder:
    """Mutable accumulator private to :class:`SortedTimelines`: the arrival's
    facts in ``timeline``, every later fact here until :meth:`freeze` (one
    frozen timeline a request, not one a fact)."""

    timeline: RequestTimeline
    emissions: list[float] | array[float] = field(default_factory=list)
    preempts: list[float] = field(default_factory=list)
    resumes: list[float] = field(default_factory=list)
    computes: list[tuple[float, int]] = field(default_factory=list)
    # tuples, not lists: most requests are never blocked, and () is shared
    not_readies: tuple[float, ...] = ()
    readies: tuple[float, ...] = ()
    num_rebuild_rows: int = 0
    admit_s: float | None = None
    reject_s: float | None = None
    reject_reason: str | None = None
    finish_s: float | None = None
    finish_reason: str | None = None
    cancel_s: float | None = None
    cancel_reason: str | None = None

    @property
    def is_terminal(self) -> bool:
        """Finished, rejected or cancelled (:attr:`RequestTimeline.is_terminal`)."""
        return self.finish_s is not None or self.reject_s is not None or self.cancel_s is not None

    @property
    def is_blocked(self) -> bool:
        """Blocked on foreign readiness (:attr:`RequestTimeline.is_blocked`)."""
        return len(self.not_readies) > len(self.readies)

    def freeze(self) -> RequestTimeline:
        emissions = self.emissions
        return replace(
            self.timeline,
            admit_s=self.admit_s,
            reject_s=self.reject_s,
            reject_reason=self.reject_reason,
            emission_s=emissions if isinstance(emissions, array) else tuple(emissions),
            finish_s=self.finish_s,
            finish_reason=self.finish_reason,
            cancel_s=self.cancel_s,
            cancel_reason=self.cancel_reason,
            preempt_s=tuple(self.preempts),
            resume_s=tuple(self.resumes),
            compute_s=tuple(self.computes),
            num_rebuild_rows=self.num_rebuild_rows,
            not_ready_s=self.not_readies,
            ready_s=self.readies,
        )


class SortedTimelines:
    """The timelines of an event log read in time order
    (:mod:`iterserve.metrics.event_scan`): :meth:`add` each event, then
    :meth:`finish`; an event earlier than its predecessor raises. :meth:`add_token` is
    :meth:`add` of a valid :class:`TokenEvent` from its fields, for a
    streaming reader that need not make the event object (most of a long
    run's facts are output tokens)."""

    __slots__ = ("_builders", "_last_s", "_end_s", "_compact", "_live", "_append")

    def __init__(self, *, end_s: float = math.inf, compact: bool = False) -> None:
        self._builders: dict[str, _Builder] = {}
        # the emission times of the requests that may emit now: neither ended
        # nor preempted and not resumed nor blocked on readiness (a long run's few live ones)
        self._live: dict[str, list[float] | array[float]] = {}
        self._last_s = -math.inf
        self._end_s = end_s
        self._compact = compact
        # appends one time to an emissions list or array, unbound (list.append, array.append)
        self._append: Callable[[Any, float], None] = array.append if compact else list.append

    def add(self, event: Event) -> None:
        if event.time_s < self._last_s:
            raise EventLogError(f"{event.kind} at {event.time_s} s for request "
                                f"{event.request_id!r} precedes the previous event at "
                                f"{self._last_s} s")
        self._last_s = event.time_s
        if event.time_s >= self._end_s:
            return
        if isinstance(event, ArrivalEvent):
            arrived = _add_arrival(self._builders, event, self._compact)
            self._live[event.request_id] = arrived.emissions
            return
        builder = self._builders.get(event.request_id)
        if builder is None:
            raise EventLogError(f"{event.kind} before arrival for request {event.request_id!r}")
        _apply(builder, event)
        if (builder.is_terminal or len(builder.preempts) > len(builder.resumes)
                or builder.is_blocked):
            self._live.pop(event.request_id, None)
        else:
            self._live[event.request_id] = builder.emissions

    def add_token(self, time_s: float, request_id: str, token_index: int) -> bool:
        """:meth:`add` of ``TokenEvent(time_s, request_id,
        token_index=token_index)`` (valid fields) when it breaks no rule;
        False, changing nothing, when it would raise: the caller then adds
        the event object, which raises the error :meth:`add` names."""
        if time_s < self._last_s:
            return False
        if time_s >= self._end_s:
            self._last_s = time_s
            return True
        builder = self._builders.get(request_id)
        if (builder is None or builder.is_terminal
                or _emission_fault(builder, token_index) is not None):
            return False
        builder.emissions.append(time_s)
        self._last_s = time_s
        return True

    def add_tokens(self, time_s: float, request_ids: Sequence[object],
                   token_indices: Sequence[object], start: int = 0) -> int:
        """:meth:`add_token` of each entry from ``start`` on (a ``tokens``
        line's run: one time, a valid one), while the entry's fields are
        plainly valid (a non-empty str id, an int index >= 1) and it breaks
        no rule; returns the index of the first entry not added (the length:
        all). The caller adds that entry's event object, which raises the
        error :meth:`add` names or is added, and goes on from the next."""
        if time_s < self._last_s:
            return start
        count = len(request_ids)
        if (not start and time_s < self._end_s
                and self._add_run(time_s, request_ids, token_indices)):
            self._last_s = time_s
            return count
        for entry in range(start, count):
            request_id, index = request_ids[entry], token_indices[entry]
            if (type(request_id) is not str or type(index) is not int or index < 1
                    or not self.add_token(time_s, request_id, index)):
                return entry
        return count

    def _add_run(self, time_s: float, request_ids: Sequence[object],
                 token_indices: Sequence[object]) -> bool:
        """The whole run at once, in C-level passes, when every entry is
        plainly valid and its request's next emission (distinct live
        requests: known, none ended or preempted; each index an int, the
        next); False, changing nothing, otherwise (the caller then goes
        entry by entry). A live request's id is a str key: any other id
        is not found."""
        if type(token_indices) is not list or set(map(type, token_indices)) != _INT_TYPE:
            return False
        try:
            emissions = list(map(self._live.__getitem__, cast("Sequence[str]", request_ids)))
        except (KeyError, TypeError):  # not live, or not even hashable
            return False
        if (list(map(len, emissions)) != token_indices
                or len(set(request_ids)) != len(request_ids)):
            return False
        any(map(self._append, emissions, repeat(time_s)))  # appends (None each), at C speed
        return True

    def finish(self) -> dict[str, RequestTimeline]:
        """The timelines, by request id in arrival order; the builder is spent."""
        builders, timelines = self._builders, {}
        self._live.clear()
        for request_id in list(builders):  # each builder's lists go as its tuples come
            timelines[request_id] = builders.pop(request_id).freeze()
        return timelines


_INT_TYPE = {int}


def _add_arrival(builders: dict[str, _Builder], event: ArrivalEvent,
                 compact: bool) -> _Builder:
    if event.request_id in builders:
        raise EventLogError(f"duplicate arrival for request {event.request_id!r}")
    timeline = RequestTimeline(
        request_id=event.request_id,
        client_id=event.client_id,
        arrival_s=event.time_s,
        num_prompt_tokens=event.num_prompt_tokens,
    )
    builder = builders[event.request_id] = _Builder(timeline, array("d") if compact else [])
    return builder


def _apply(builder: _Builder, event: Event) -> None:
    if builder.is_terminal:
        raise _violation(event, "arrives after the request's terminal event")
    is_live = builder.admit_s is not None or bool(builder.emissions)
    if isinstance(event, AdmitEvent):
        if is_live:
            raise _violation(event, "admits a request twice")
        builder.admit_s = event.time_s
    elif isinstance(event, RejectEvent):
        if is_live:
            raise _violation(event, "rejects a request that was already admitted")
        builder.reject_s, builder.reject_reason = event.time_s, event.reason
    elif isinstance(event, CancelEvent):
        builder.cancel_s, builder.cancel_reason = event.time_s, event.reason
    elif isinstance(event, FinishEvent):
        _apply_finish(builder, event)
    elif isinstance(event, FirstTokenEvent | TokenEvent):
        _apply_emission(builder, event)
    elif isinstance(event, PreemptEvent | ResumeEvent | ScheduleEvent | ComputeEvent):
        _apply_service_fact(builder, event, is_live)
    elif isinstance(event, NotReadyEvent | ReadyEvent):
        _apply_readiness(builder, event)
    else:  # pragma: no cover - ArrivalEvent is handled by the caller
        raise _violation(event, "is not a per-request lifecycle event")


def _apply_emission(builder: _Builder, event: FirstTokenEvent | TokenEvent) -> None:
    index = 0 if isinstance(event, FirstTokenEvent) else event.token_index
    fault = _emission_fault(builder, index)
    if fault is not None:
        raise _violation(event, fault)
    builder.emissions.append(event.time_s)


def _emission_fault(builder: _Builder, index: int) -> str | None:
    """Why output ``index`` may not be emitted now, or None: the next index
    only, and never while preempted."""
    expected_index = len(builder.emissions)
    if index != expected_index:
        return f"emits output {index} but output {expected_index} is next"
    if len(builder.preempts) > len(builder.resumes):
        return "emits while preempted"
    if builder.is_blocked:
        return "emits while not ready"
    return None


def _apply_finish(builder: _Builder, event: FinishEvent) -> None:
    if event.num_output_tokens != len(builder.emissions):
        raise _violation(
            event,
            f"reports {event.num_output_tokens} outputs but {len(builder.emissions)} were emitted",
        )
    if not builder.emissions:
        raise _violation(event, "finishes without emitting any output (0x01A: prefill emits one)")
    builder.finish_s, builder.finish_reason = event.time_s, event.reason


def _apply_service_fact(
    builder: _Builder,
    event: PreemptEvent | ResumeEvent | ScheduleEvent | ComputeEvent,
    is_live: bool,
) -> None:
    if not is_live:
        raise _violation(event, "happens before admission")
    is_preempted = len(builder.preempts) > len(builder.resumes)
    if isinstance(event, PreemptEvent):
        if is_preempted:
            raise _violation(event, "preempts a request that is already preempted")
        builder.preempts.append(event.time_s)
    elif isinstance(event, ResumeEvent):
        if not is_preempted:
            raise _violation(event, "resumes a request that is not preempted")
        builder.resumes.append(event.time_s)
    elif is_preempted:
        raise _violation(event, "schedules or computes a preempted request")
    elif builder.is_blocked:
        raise _violation(event, "schedules or computes a request that is not ready")
    elif isinstance(event, ComputeEvent):
        if event.is_rebuild:
            builder.num_rebuild_rows += event.num_rows
        else:
            builder.computes.append((event.time_s, event.num_rows))


def _apply_readiness(builder: _Builder, event: NotReadyEvent | ReadyEvent) -> None:
    """A change of the engine's readiness flag (0x0C): a request arrives
    ready, so the changes alternate, not_ready first."""
    if isinstance(event, NotReadyEvent):
        if builder.is_blocked:
            raise _violation(event, "blocks a request that is already not ready")
        builder.not_readies += (event.time_s,)
    else:
        if not builder.is_blocked:
            raise _violation(event, "readies a request that is not blocked")
        builder.readies += (event.time_s,)


def _violation(event: Event, what: str) -> EventLogError:
    return EventLogError(
        f"{event.kind} at {event.time_s} s for request {event.request_id!r} {what}"
    )
