"""Run trace: per-iteration composition and per-request clocks, as facts.

An engine observer that records what each iteration held (prefill, decode
and rebuild rows; sequences), the queues and KV use at its decision, and
when each request emitted its first token and finished, on the run's clock.
Reports are computed from it afterwards (the batch composition and resource
samples of a simulation too: :func:`~iterserve.engine.composition.composition_of`).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import compress, repeat
from operator import is_not

from iterserve.engine.observer import EngineObserver
from iterserve.records.columns import field_columns
from iterserve.records.plan import IterationPlan, rows_by_kind
from iterserve.records.result import IterationResult
from iterserve.records.spec import RequestSpec
from iterserve.records.state import SchedulerState, blocks_used_of_total
from iterserve.records.view import TERMINAL_LIFECYCLES, RequestView, WorkKind
from iterserve.records.view_map import views_or_none

_REQUEST_ID = operator.itemgetter(0)  # CompletedInterval.request_id
_FINISH_REASON = operator.itemgetter(6)  # CompletedInterval.finish_reason
_TERMINAL_VALUES = frozenset(lifecycle._value_ for lifecycle in TERMINAL_LIFECYCLES)


@dataclass(frozen=True, slots=True)
class IterationRecord:
    decision_id: int
    start: float
    duration: float
    num_prefill_rows: int
    num_decode_rows: int
    num_rebuild_rows: int
    num_sequences: int
    num_waiting: int
    num_running: int
    num_suspended: int
    num_kv_blocks_used: int  # 0 when memory is unbounded
    num_kv_blocks_total: int


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    client_id: str
    arrival: float
    num_prompt_tokens: int
    first_token_time: float | None = None
    finish_time: float | None = None
    num_emitted: int = 0
    finish_reason: str | None = None


class RunTrace(EngineObserver):
    """The run's per-iteration records and per-request clocks.

    A request's record takes its frontier facts when they change in a way
    no later view undoes: its first token (a prefill row's completion), its
    end, an intent (preemption, rejection). A decode row changes only the
    emitted count, so a cut of decode rows touches no record but those that
    finished; every other record's count is read from the last views seen
    when :attr:`requests` is read (the same values as a copy at every cut).
    """

    __slots__ = ("iterations", "_records", "prefill_chunk_starts", "num_finished", "_views")

    def __init__(self) -> None:
        self.iterations: list[IterationRecord] = []
        self._records: dict[str, RequestRecord] = {}
        #: completed prefill chunk starts per request (a restart from 0 after a
        #: preemption replaces the earlier pass), for the 0x09 chunk ledger
        self.prefill_chunk_starts: dict[str, list[int]] = {}
        self.num_finished = 0  # requests with a finish time (terminal), kept as they end
        # the views of the last state seen whose emitted counts are not copied yet
        self._views: Mapping[str, RequestView] | None = None

    @property
    def requests(self) -> dict[str, RequestRecord]:
        """A record per admitted arrival, its facts as of the last state seen."""
        views, self._views = self._views, None
        if views is not None:
            for rid, record in self._records.items():
                if record.finish_time is None:
                    view = views.get(rid)
                    if view is not None:
                        record.num_emitted = view.num_emitted
        return self._records

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RunTrace):
            return NotImplemented
        return self.__getstate__() == other.__getstate__()

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __getstate__(self) -> dict[str, object]:
        """Pickled with its records settled, without the views."""
        return {"iterations": self.iterations, "_records": self.requests,
                "prefill_chunk_starts": self.prefill_chunk_starts,
                "num_finished": self.num_finished}

    def __setstate__(self, state: dict[str, object]) -> None:
        for name, value in state.items():
            setattr(self, name, value)
        self._views = None

    def on_arrival(self, spec: RequestSpec, now: float) -> None:
        """A record per admitted arrival (a request the gate rejects gets
        none), made when it arrives: no per-step scan of the waiting queue."""
        self._records[spec.request_id] = RequestRecord(spec.request_id, spec.client_id,
                                                       spec.arrival, spec.num_prompt_tokens)

    def on_step(
        self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
        successor: SchedulerState,
    ) -> None:
        num_prefill, num_decode, num_rebuild = rows_by_kind(plan.work)
        if plan.work:
            self.iterations.append(IterationRecord(
                state.decision_id, state.now, result.duration, num_prefill, num_decode,
                num_rebuild, len(plan.work), len(state.waiting), len(state.running),
                len(state.suspended), *blocks_used_of_total(state.capacity),
            ))
        completed = result.completed
        if num_prefill:  # a first token may be among the chunks: their facts, and the ends
            prefill_ids = self._chunk_starts(plan, result)
            self._update([rid for rid, reason in zip(map(_REQUEST_ID, completed),
                                                     map(_FINISH_REASON, completed), strict=True)
                          if rid in prefill_ids or reason is not None], successor)
        elif completed:  # decode and rebuild rows: only an end changes more than a count
            reasons = list(map(_FINISH_REASON, completed))
            if reasons.count(None) != len(reasons):
                self._update(compress(map(_REQUEST_ID, completed),
                                      map(is_not, reasons, repeat(None))), successor)
        if plan.intents:
            self._update([intent.request_id for intent in plan.intents], successor)
        self._views = successor.views

    def _chunk_starts(self, plan: IterationPlan, result: IterationResult) -> set[str]:
        """Record where each completed prefill chunk started (a restart from
        0 replaces the request's earlier pass); the ids of the plan's
        prefill chunks (a plan's few beside its decode rows, found in its
        columns)."""
        rids, _, _, _, _, kinds, _, _ = field_columns(plan.work)
        prefill_ids = set(compress(rids, map(operator.is_, kinds, repeat(WorkKind.PREFILL_CHUNK))))
        completed = result.completed
        for item in compress(completed, map(prefill_ids.__contains__,
                                            map(_REQUEST_ID, completed))):
            starts = self.prefill_chunk_starts.setdefault(item.request_id, [])
            if item.start == 0:
                starts.clear()
            starts.append(item.start)
        return prefill_ids

    def _update(self, request_ids: Iterable[str], successor: SchedulerState) -> None:
        """Copy each request's frontier facts from ``successor`` (one loop
        over a cut's completions: a call per cut, not per row)."""
        request_ids = list(request_ids)
        record_of, now = self._records.get, successor.now
        for rid, after in zip(request_ids, views_or_none(successor.views, request_ids),
                              strict=True):
            record = record_of(rid)
            if after is None or record is None:
                continue
            record.first_token_time = after.first_token_time
            record.num_emitted = after.num_emitted
            if after.lifecycle._value_ in _TERMINAL_VALUES:  # no Enum.__hash__ call
                self.num_finished += record.finish_time is None
                record.finish_time = now
                reason = after.finish_reason
                record.finish_reason = None if reason is None else reason.value
