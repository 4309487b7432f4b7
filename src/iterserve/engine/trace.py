"""Run trace: per-iteration composition and per-request clocks, as facts.

An engine observer that records what each iteration held (prefill, decode
and rebuild rows; sequences) and when each request emitted its first token
and finished, on the run's clock. Reports are computed from it afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from iterserve.engine.observer import EngineObserver
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.spec import RequestSpec
from iterserve.records.state import SchedulerState
from iterserve.records.view import TERMINAL_LIFECYCLES, WorkKind


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


@dataclass(slots=True)
class RunTrace(EngineObserver):
    iterations: list[IterationRecord] = field(default_factory=list)
    requests: dict[str, RequestRecord] = field(default_factory=dict)
    #: completed prefill chunk starts per request (a restart from 0 after a
    #: preemption replaces the earlier pass), for the 0x09 chunk ledger
    prefill_chunk_starts: dict[str, list[int]] = field(default_factory=dict)
    num_finished: int = 0  # requests with a finish time (terminal), kept as they end

    def on_arrival(self, spec: RequestSpec, now: float) -> None:
        """A record per admitted arrival (a request the gate rejects gets
        none), made when it arrives: no per-step scan of the waiting queue."""
        self.requests[spec.request_id] = RequestRecord(spec.request_id, spec.client_id,
                                                       spec.arrival, spec.num_prompt_tokens)

    def on_step(
        self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
        successor: SchedulerState,
    ) -> None:
        rows = {WorkKind.PREFILL_CHUNK: 0, WorkKind.DECODE_ROW: 0, WorkKind.REBUILD: 0}
        for work in plan.work:
            rows[work.kind] += work.end - work.start
        if plan.work:
            self.iterations.append(IterationRecord(
                state.decision_id, state.now, result.duration, rows[WorkKind.PREFILL_CHUNK],
                rows[WorkKind.DECODE_ROW], rows[WorkKind.REBUILD], len(plan.work),
                len(state.waiting), len(state.running),
            ))
        kinds = {work.request_id: work.kind for work in plan.work}
        prefill = WorkKind.PREFILL_CHUNK
        for item in result.completed:
            if kinds[item.request_id] is prefill:
                starts = self.prefill_chunk_starts.setdefault(item.request_id, [])
                if item.start == 0:
                    starts.clear()
                starts.append(item.start)
            self._update(item.request_id, successor)
        for intent in plan.intents:
            self._update(intent.request_id, successor)

    def _update(self, rid: str, successor: SchedulerState) -> None:
        after = successor.views.get(rid)
        record = self.requests.get(rid)
        if after is None or record is None:
            return
        record.first_token_time = after.first_token_time
        record.num_emitted = after.num_emitted
        if after.lifecycle in TERMINAL_LIFECYCLES:
            self.num_finished += record.finish_time is None
            record.finish_time = successor.now
            reason = after.finish_reason
            record.finish_reason = None if reason is None else reason.value
