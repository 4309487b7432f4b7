"""EventRecorder: engine facts -> the metrics event log (0x07, docs/metrics.md).

An engine observer; it changes nothing. Mapping:

    on_arrival              ArrivalEvent at the ORIGINAL arrival (TTFT origin)
    on_reject (arrival gate) ArrivalEvent + RejectEvent(reason), at arrival
    ADMIT intent            AdmitEvent at the decision's ``now`` (ResumeEvent
                            when a recompute-preempted request is re-admitted)
    PREEMPT_* intents       PreemptEvent(mode "swap" when the request ended
                            suspended-preserved, else "recompute")
    RESUME intent           ResumeEvent (none when the resume failed)
    REJECT / ABORT intents  RejectEvent / CancelEvent(reason "abort")
    completed prefill or    ComputeEvent(num_rows, is_rebuild), at the
      rebuild rows            successor's ``now`` (the result's publication)
    emissions               FirstTokenEvent / TokenEvent(token_index=j), then
                            FinishEvent(reason, num_output_tokens) on a stop
    on_cancel               CancelEvent(reason "client") at the cut
    on_readiness            NotReadyEvent / ReadyEvent for each request whose
                            readiness flag flipped, at the cut (F63: a client
                            whose live requests are all not ready is not
                            eligible); none for a request that never flips

Clock: every time is ``clock value * seconds_per_clock_unit`` (see
:func:`iterserve.cost.seconds_per_clock_unit`: 1/1000 on the ``ms``
clock; on the ``iteration`` clock one iteration is 1 s unless a fixed cost
model says otherwise). The engine publishes an arrival at the first cut at
or after it, so an arrival can be recorded after facts stamped later than
it; :meth:`EventRecorder.log` therefore orders the facts by time with a
stable sort, which keeps each request's causal order.

Per executed iteration the recorder also keeps its row composition and a
resource sample at the decision (:class:`~iterserve.engine.composition.
BatchComposition`) for plots and the run summary, unless it is made with
``composes=False`` and given one made elsewhere
(:meth:`EventRecorder.adopt_composition`: a simulation's recorder takes the
one made from its run trace, which counts the same rows at every decision).

Streaming: given a ``sink`` (a text stream), the recorder holds only the
facts of the last cut and writes the rest to the sink as JSONL lines, the
bytes :func:`iterserve.metrics.events.write_jsonl` writes for the same
sorted log. Every fact recorded at a cut is stamped at or after the
previous cut (arrivals are published at the first cut at or after them),
so sorting what is pending at each cut and writing it reproduces the
stable sort of the whole run; a fact stamped before what was already
written raises. :meth:`EventRecorder.close` writes the rest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import compress
from json.encoder import encode_basestring_ascii
from operator import itemgetter, not_
from typing import IO

from iterserve.engine.composition import BatchComposition
from iterserve.engine.observer import EngineObserver
from iterserve.metrics.capacity import IterationComposition
from iterserve.metrics.columns import RecordColumns
from iterserve.metrics.events import (
    AdmitEvent,
    ArrivalEvent,
    CancelEvent,
    ComputeEvent,
    Event,
    EventLog,
    EventLogError,
    FinishEvent,
    FirstTokenEvent,
    NotReadyEvent,
    PreemptEvent,
    ReadyEvent,
    RejectEvent,
    ResumeEvent,
    TokenEvent,
    TokenRuns,
    event_line,
    json_text,
    tokens_line,
)
from iterserve.metrics.series import ResourceSample
from iterserve.records import frontier
from iterserve.records.columns import field_columns
from iterserve.records.plan import (
    IntentKind,
    IterationPlan,
    QueueIntent,
)
from iterserve.records.result import CompletedInterval, IterationResult
from iterserve.records.spec import RequestSpec
from iterserve.records.state import SchedulerState
from iterserve.records.view import FinishReason, Lifecycle, RequestView, WorkKind, view_num_emitted


def _kinds(plan: IterationPlan) -> dict[str, WorkKind]:
    """Each planned request's work kind, from the plan's columns."""
    work = field_columns(plan.work)
    return dict(zip(work[0], work[5], strict=True)) if work else {}


class _TokenRun:
    """Token facts at one time, pending: their request ids as JSON strings
    and their indices, rendered as one line (:func:`tokens_line`)."""

    __slots__ = ("time_text", "ids", "indices")

    def __init__(self, time_text: str) -> None:
        self.time_text = time_text
        self.ids: list[str] = []
        self.indices: list[int] = []

    def line(self) -> str:
        return tokens_line(self.time_text, self.ids, self.indices)


class EventRecorder(EngineObserver):
    """Collects the run's metric facts; read them with :meth:`log`."""

    def __init__(self, seconds_per_clock_unit: float = 1.0, sink: IO[str] | None = None,
                 composes: bool = True) -> None:
        self.composition = BatchComposition(seconds_per_clock_unit)  # ValueError: unit <= 0
        self.seconds_per_clock_unit = seconds_per_clock_unit
        self._composes = composes
        self._events: list[Event] = []  # without a sink: every fact
        # with a sink: (time, lines with their newlines, or a run of tokens) not yet written
        self._pending: list[tuple[float, str | _TokenRun]] = []
        self._runs = TokenRuns()  # the open run is written when a fact follows it, or at close
        self._admitted: set[str] = set()
        self._preempted: set[str] = set()
        self._sink = sink
        self._streamed = sink is not None  # the facts went to a sink (kept once detached)
        self._written_s = -math.inf  # time of the last fact written to the sink

    @property
    def iterations(self) -> RecordColumns[IterationComposition]:
        """The row composition of each executed iteration."""
        return self.composition.iterations

    @property
    def samples(self) -> RecordColumns[ResourceSample]:
        """The resource sample at each executed iteration's decision."""
        return self.composition.samples

    def adopt_composition(self, composition: BatchComposition) -> EventRecorder:
        """This recorder with ``composition`` (kept by another observer of
        the same run) as its own; only for one made with ``composes=False``."""
        if self._composes:
            raise ValueError("this recorder keeps its own composition")
        if composition.seconds_per_clock_unit != self.seconds_per_clock_unit:
            raise ValueError("the composition was stamped on another clock")
        self.composition = composition
        return self

    def to_s(self, clock_value: float) -> float:
        return clock_value * self.seconds_per_clock_unit

    @property
    def is_streaming(self) -> bool:
        return self._streamed

    def detached(self) -> EventRecorder:
        """This recorder, closed, without its sink: what another process
        reads of it (its batch composition, where it keeps one; the facts are
        in the sink's file). Pickles; ``is_streaming`` stays true."""
        self.close()
        self._sink = None
        return self

    def log(self) -> EventLog:
        """The facts in time order (stable: equal times keep causal order)."""
        if self._streamed:
            raise ValueError("the events were streamed to the sink; read them back from there")
        return EventLog(sorted(self._events, key=lambda event: event.time_s))

    def close(self) -> None:
        """Write the pending facts to the sink (nothing to do without one)."""
        if self._sink is not None:
            self._write_pending()
            parts: list[str] = []
            self._runs.flush(parts)
            self._sink.write("".join(parts))

    def _record(self, event: Event) -> None:
        if self._sink is None:
            self._events.append(event)
        else:
            self._pending.append((event.time_s, event_line(event) + "\n"))

    def _token(self, time_s: float, rid: str, token_index: int) -> None:
        """A TokenEvent; streamed, it joins the pending run of tokens at its
        time without the object (one per output token: the hot path)."""
        if self._sink is None:
            self._events.append(TokenEvent(time_s, rid, token_index=token_index))
        else:
            run = self._token_run(time_s)
            run.ids.append(encode_basestring_ascii(rid))
            run.indices.append(token_index)

    def _token_run(self, time_s: float) -> _TokenRun:
        """The pending run that tokens at ``time_s`` join: the last pending
        entry when it is a run at that time, else a new one."""
        pending, text = self._pending, json_text(time_s)
        if pending:
            last = pending[-1][1]
            if type(last) is _TokenRun and last.time_text == text:
                return last
        run = _TokenRun(text)
        pending.append((time_s, run))
        return run

    def _write_pending(self) -> None:
        """Write the pending facts in time order (a stable sort). Adjacent
        runs of tokens at one time are one run (one ``tokens`` line, as
        :func:`~iterserve.metrics.events.event_lines` writes them); the last
        run is held back until a fact follows it or :meth:`close`, because
        the next cut's tokens may be stamped at the same time."""
        assert self._sink is not None
        pending = sorted(self._pending, key=itemgetter(0))
        self._pending = []
        if not pending:
            return
        if pending[0][0] < self._written_s:
            first = pending[0][1]
            line = first.line() if isinstance(first, _TokenRun) else first
            raise EventLogError(f"{line.partition(chr(10))[0]} precedes a fact already written "
                                f"at {self._written_s} s")  # an entry may hold several lines
        parts: list[str] = []
        runs = self._runs
        for _, entry in pending:
            if isinstance(entry, _TokenRun):
                runs.add_run(entry.time_text, entry.ids, entry.indices, parts)
            else:
                runs.add_line(entry, parts)
        self._sink.write("".join(parts))  # one write a cut
        self._written_s = pending[-1][0]

    def on_arrival(self, spec: RequestSpec, now: float) -> None:
        self._record(self._arrival(spec))

    def on_reject(self, spec: RequestSpec, reason: str, now: float) -> None:
        self._record(self._arrival(spec))
        self._record(RejectEvent(self.to_s(spec.arrival), spec.request_id, reason=reason))

    def on_cancel(self, request_id: str, state: SchedulerState, successor: SchedulerState) -> None:
        self._record(CancelEvent(self.to_s(state.now), request_id, reason="client"))
        self._forget(successor.finished)

    def on_readiness(self, changed: Mapping[str, bool], successor: SchedulerState) -> None:
        # stamped at the cut, after the facts the last step published at it (the
        # stable sort keeps that order); the next on_step writes them out
        time_s = self.to_s(successor.now)
        for rid, is_ready in changed.items():
            self._record(ReadyEvent(time_s, rid) if is_ready else NotReadyEvent(time_s, rid))

    def _forget(self, ended: Sequence[str]) -> None:
        """Requests terminal at this cut need no admission or preemption
        mark any more (a long run's memory is what is live)."""
        for rid in ended:
            self._admitted.discard(rid)
            self._preempted.discard(rid)

    def on_step(
        self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
        successor: SchedulerState,
    ) -> None:
        if self._sink is not None:
            self._write_pending()  # every fact from here on is stamped at or after state.now
        decided_s = self.to_s(state.now)
        for intent in plan.intents:
            self._intent(intent, successor.views[intent.request_id], decided_s)
        if plan.work and self._composes:
            self.composition.record(state, plan, decided_s)
        if successor.finished:
            self._forget(successor.finished)
        if not result.completed:
            return
        published_s = self.to_s(successor.now)
        if self._sink is None:
            kinds = _kinds(plan)
            views = state.views
            for completed in result.completed:
                rid = completed.request_id
                self._completion(completed, kinds[rid], views[rid].num_emitted, published_s)
        else:
            self._stream_completions(state, plan, result, published_s)

    def _stream_completions(self, state: SchedulerState, plan: IterationPlan,
                            result: IterationResult, time_s: float) -> None:
        """The cut's completion facts, streamed. A plain decode token (an
        emission after output 1 that stops nothing: a decode row, 0x01A:
        prefill runs only while nothing is emitted and rebuild emits nothing)
        joins the pending run of tokens, as :meth:`_token` would, without
        the object or the call (the hot path: one per decode row); each run
        between the other facts is one pending entry (one time: the stable
        sort keeps it in place). The plain ones are found a column at a
        time, and each stretch of them between the other facts joins its
        run at once."""
        completed = result.completed
        rids, _, _, _, emitted, _, reasons = field_columns(completed)
        befores = list(map(view_num_emitted, map(state.views.__getitem__, rids)))
        is_plain = frontier.plain_decode_tokens(befores, emitted, reasons)
        kinds: dict[str, WorkKind] | None = None  # made only for a completion off the hot path
        plain_from = 0  # the plain tokens since the last other fact
        for index in compress(range(len(rids)), map(not_, is_plain)):
            if plain_from < index:
                self._plain_tokens(time_s, rids[plain_from:index], befores[plain_from:index])
            if kinds is None:
                kinds = _kinds(plan)
            self._completion(completed[index], kinds[rids[index]], befores[index], time_s)
            plain_from = index + 1
        if plain_from < len(rids):
            self._plain_tokens(time_s, rids[plain_from:], befores[plain_from:])

    def _plain_tokens(self, time_s: float, rids: Sequence[str], befores: list[int]) -> None:
        """Plain decode tokens, in order, join the pending run at ``time_s``
        (:meth:`_token` for each, at C speed)."""
        run = self._token_run(time_s)
        run.ids += map(encode_basestring_ascii, rids)
        run.indices += befores

    def _arrival(self, spec: RequestSpec) -> ArrivalEvent:
        return ArrivalEvent(self.to_s(spec.arrival), spec.request_id, client_id=spec.client_id,
                            num_prompt_tokens=spec.num_prompt_tokens)

    def _intent(self, intent: QueueIntent, after: RequestView, time_s: float) -> None:
        """One applied intent, read from the successor's lifecycle (a failed
        resume leaves the request suspended; a failed preservation falls
        back to recompute, 0x0C)."""
        rid = intent.request_id
        kind = intent.kind
        event: Event
        if kind is IntentKind.GUARD:
            return  # no lifecycle change: the forced interval's facts follow
        if kind is IntentKind.ADMIT or kind is IntentKind.RESUME:
            if after.lifecycle is Lifecycle.SUSPENDED_PRESERVED:
                return  # the resume failed: still suspended
            if rid in self._preempted:
                self._preempted.discard(rid)
                event = ResumeEvent(time_s, rid)
            else:
                self._admitted.add(rid)
                event = AdmitEvent(time_s, rid)
        elif kind is IntentKind.PREEMPT_RECOMPUTE or kind is IntentKind.PREEMPT_PRESERVE_EXACT:
            self._preempted.add(rid)
            mode = "swap" if after.lifecycle is Lifecycle.SUSPENDED_PRESERVED else "recompute"
            event = PreemptEvent(time_s, rid, mode=mode)
        elif kind is IntentKind.REJECT and rid not in self._admitted:
            event = RejectEvent(time_s, rid, reason=intent.reason or "rejected")
        else:  # ABORT, or a REJECT after admission: ended without success
            event = CancelEvent(time_s, rid, reason=intent.reason or kind.value)
        self._record(event)

    def _completion(self, item: CompletedInterval, kind: WorkKind, num_emitted_before: int,
                    time_s: float) -> None:
        rid = item.request_id
        if kind is not WorkKind.DECODE_ROW:
            self._record(ComputeEvent(time_s, rid, num_rows=item.end - item.start,
                                             is_rebuild=kind is WorkKind.REBUILD))
        if not item.emitted:
            return
        if num_emitted_before == 0:
            self._record(FirstTokenEvent(time_s, rid))
        else:
            self._token(time_s, rid, num_emitted_before)
        reason = item.finish_reason
        if reason is FinishReason.STOP or reason is FinishReason.LENGTH:
            self._record(FinishEvent(time_s, rid, reason=reason.value,
                                            num_output_tokens=num_emitted_before + 1))
        elif reason is not None:
            self._record(CancelEvent(time_s, rid, reason=reason.value))
