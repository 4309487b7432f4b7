"""ResultBuilder: the one assembly of an :class:`IterationResult` (0x01A).

Both executors answer a plan the same way: apply the plan's memory intents
(failures are facts), back each interval or record its failure, commit the
rows of each completed interval, emit where the frontier rule says an
interval emits, stop at the length limit, debit service without rebuild rows
(0x0C), and release the requests that finished. Only what differs stays in
each executor: where tokens and stop reasons come from (hidden truth or
sampling) and how long the iteration took (cost model or wall clock).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from iterserve.engine.kv_residency import KvResidency
from iterserve.records.frontier import earns_service, emits, is_length_stop
from iterserve.records.plan import IterationPlan, WorkItem
from iterserve.records.receipts import PreservationResult
from iterserve.records.result import CompletedInterval, IterationResult, WorkFailure
from iterserve.records.state import SchedulerState
from iterserve.records.view import FinishReason, RequestView

_LENGTH = FinishReason.LENGTH
_new_tuple = tuple.__new__  # NamedTuple.__new__ is slow on the hot path


class ResultBuilder:
    """Collects one iteration's facts, in plan order, then builds the result.

    ``length_first``: when the executor's own stop and the length limit fall
    on the same emission, report LENGTH (the simulator, whose hidden truth
    is a length) rather than the executor's reason (a sampled stop token
    wins on the real model, as in vLLM's ``check_stop``).
    """

    __slots__ = ("_plan", "_views", "_kv", "_commit_kv", "_length_first", "completed",
                 "failures", "_failed_ids", "_service", "finished", "_receipts")

    def __init__(self, plan: IterationPlan, state: SchedulerState, kv: KvResidency | None,
                 *, length_first: bool = False, commits_rows: bool = True) -> None:
        """Applies the plan's memory intents through ``kv`` (if any) first.
        ``commits_rows`` False: the executor commits each interval's rows
        itself when it backs them (``KvResidency.back_and_commit``)."""
        self._plan = plan
        self._views = state.views
        self._kv = kv
        self._commit_kv = kv if commits_rows else None
        self._length_first = length_first
        self.completed: list[CompletedInterval] = []
        self.failures: list[WorkFailure] = []
        self._failed_ids: set[str] = set()
        self._service: Counter[str] = Counter()
        self.finished: list[str] = []
        self._receipts: tuple[PreservationResult, ...] = ()
        if kv is not None:
            outcome = kv.apply_intents(plan, state)
            self._receipts = outcome.preservations  # the transition consumes them (0x0C)
            for rid, reason in outcome.failures:
                self._failed_ids.add(rid)
                self.failures.append(WorkFailure(rid, self._views[rid].generation, reason))

    def intent_failed(self, request_id: str) -> bool:
        """Whether the plan's memory intent for ``request_id`` failed."""
        return request_id in self._failed_ids

    def fail(self, work: WorkItem, reason: str = "kv_allocation") -> None:
        """``work`` did not run: it advances nothing and earns no service."""
        self.failures.append(WorkFailure(work.request_id, work.generation, reason))

    def complete(self, work: WorkItem, view: RequestView, token_id: int | None = None,
                 stop: FinishReason | None = None) -> FinishReason | None:
        """Publish ``work`` as completed; returns its finish reason.

        ``token_id`` and ``stop`` (the executor's own stop observation) are
        used only when the interval emits (decode, or prefill reaching p).
        """
        self.complete_rows((work,), (view,), (token_id,), (stop,))
        return self.completed[-1].finish_reason

    def complete_rows(self, works: Sequence[WorkItem], views: Sequence[RequestView],
                      token_ids: Iterable[int | None],
                      stops: Iterable[FinishReason | None]) -> None:
        """:meth:`complete` of each ``works[i]`` with ``views[i]``,
        ``token_ids[i]`` and ``stops[i]``, in order, in one loop (the
        simulator completes a whole plan at once)."""
        commit_kv, length_first = self._commit_kv, self._length_first
        service, finished, append = self._service, self.finished, self.completed.append
        for work, view, token_id, reason in zip(works, views, token_ids, stops, strict=True):
            rid, generation, _, start, end, kind, _, _ = work  # one unpack (hot path)
            if commit_kv is not None:
                commit_kv.commit(rid, end)
            if earns_service(kind):
                service[view.client_id] += end - start
            if not emits(kind, view.num_prompt_tokens, end):
                append(_new_tuple(CompletedInterval, (rid, generation, start, end, False, None,
                                                      None)))
                continue
            if (reason is None or length_first) and is_length_stop(
                view.num_emitted + 1, view.max_output_tokens
            ):
                reason = _LENGTH
            if reason is not None:
                finished.append(rid)
            append(_new_tuple(CompletedInterval, (rid, generation, start, end, True, token_id,
                                                  reason)))

    def release_finished(self) -> None:
        """Free the blocks of every request that finished in this iteration."""
        if self._kv is not None:
            self._kv.release(self.finished)

    def build(self, duration: float) -> IterationResult:
        """The result; capacity facts come from the memory owner, if any."""
        plan = self._plan
        return IterationResult(
            decision_id=plan.decision_id,
            input_state_version=plan.input_state_version,
            completed=tuple(self.completed),
            failures=tuple(self.failures),
            service=dict(self._service),
            duration=duration,
            capacity=None if self._kv is None else self._kv.facts(),
            receipts=self._receipts,
        )
