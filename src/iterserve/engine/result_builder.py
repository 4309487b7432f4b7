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
from itertools import compress, repeat
from operator import add, and_, getitem, is_not, ne, sub

from iterserve.engine.kv_residency import KvResidency
from iterserve.records.columns import Columns, field_columns
from iterserve.records.frontier import (
    WorkKind,
    all_decode_kinds,
    earns_service_rows,
    emits_rows,
    length_stop_rows,
)
from iterserve.records.plan import IterationPlan, WorkItem
from iterserve.records.receipts import PreservationResult, ReleaseResult
from iterserve.records.result import Completed, CompletedInterval, IterationResult, WorkFailure
from iterserve.records.state import SchedulerState
from iterserve.records.view import (
    FinishReason,
    RequestView,
    view_client_id,
    view_field,
    view_num_emitted,
)

_LENGTH = FinishReason.LENGTH
_new_tuple = tuple.__new__  # NamedTuple.__new__ is slow on the hot path
# RequestView fields read a column at a time (an itemgetter runs in C)
_PROMPT, _MAX_OUTPUT = map(view_field, ("num_prompt_tokens", "max_output_tokens"))


class ResultBuilder:
    """Collects one iteration's facts, in plan order, then builds the result.

    ``length_first``: when the executor's own stop and the length limit fall
    on the same emission, report LENGTH (the simulator, whose hidden truth
    is a length) rather than the executor's reason (a sampled stop token
    wins on the real model, as in vLLM's ``check_stop``).
    """

    __slots__ = ("_plan", "_views", "_kv", "_commit_kv", "_length_first", "completed",
                 "_columns", "failures", "_failed_ids", "_service", "finished", "_receipts",
                 "_releases")

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
        self._columns: Columns | None = None  # of completed, made by its one complete_rows
        self.failures: list[WorkFailure] = []
        self._failed_ids: set[str] = set()
        self._service: Counter[str] = Counter()
        self.finished: list[str] = []
        self._receipts: tuple[PreservationResult, ...] = ()
        self._releases: tuple[ReleaseResult, ...] = ()
        if kv is not None:
            outcome = kv.apply_intents(plan, state)
            self._receipts = outcome.preservations  # the transition consumes them (0x0C)
            self._releases = outcome.releases  # they publish the freed capacity (0x0C)
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
        ``token_ids[i]`` and ``stops[i]``, in order: the same facts as one
        call per row, computed a column at a time with no Python-level call
        per row (the simulator completes a whole plan at once)."""
        token_ids, stops = list(token_ids), list(stops)
        if not len(views) == len(token_ids) == len(stops) == len(works):
            raise ValueError("complete_rows needs one view, token id and stop per work item")
        if not works:
            return
        rids, generations, _, starts, ends, kinds, _, _ = field_columns(works)
        if self._commit_kv is not None:  # in plan order: a commit may cache prefix blocks
            for rid, end in zip(rids, ends, strict=True):
                self._commit_kv.commit(rid, end)
        widths = list(map(sub, ends, starts))
        if all_decode_kinds(kinds) and widths.count(1) == len(widths):
            self._service.update(map(view_client_id, views))  # the common step: one row each
            emitted = [True] * len(works)
        else:
            self._debit(views, kinds, widths)
            emitted = emits_rows(kinds, map(_PROMPT, views), ends)
        reasons = self._reasons(views, emitted, stops)
        if not all(emitted):  # a row that emits nothing publishes no token and no reason
            token_ids = list(map(getitem, zip(repeat(None), token_ids, strict=False), emitted))
            reasons = list(map(getitem, zip(repeat(None), reasons, strict=False), emitted))
        self.finished.extend(compress(rids, map(is_not, reasons, repeat(None))))
        columns = (rids, generations, starts, ends, tuple(emitted), tuple(token_ids),
                   tuple(reasons))
        # the columns stand for the result's completions if these rows are all of them
        self._columns = None if self.completed else columns
        self.completed.extend(map(_new_tuple, repeat(CompletedInterval), zip(
            *columns, strict=True)))

    def _debit(self, views: Sequence[RequestView], kinds: Sequence[WorkKind],
               widths: list[int]) -> None:
        """Service of each completed row but a rebuild's (0x0C), per client.
        One count per earning row first (``Counter.update`` at C speed, so
        clients enter in the order of their first earning row, as with a
        sum per row), then the rest of each row of another width."""
        earning = earns_service_rows(kinds)
        clients = list(map(view_client_id, views))
        self._service.update(compress(clients, earning))
        if widths.count(1) != len(widths):
            other = map(and_, earning, map(ne, widths, repeat(1)))
            for client, width in compress(zip(clients, widths, strict=True), other):
                self._service[client] += width - 1

    def _reasons(self, views: Sequence[RequestView], emitted: list[bool],
                 stops: list[FinishReason | None]) -> list[FinishReason | None]:
        """Each row's finish reason if it emits: the executor's stop, or
        LENGTH where the emission reaches ``max_output_tokens`` and the
        executor saw no stop (or ``length_first``)."""
        at_limit = length_stop_rows(map(add, map(view_num_emitted, views), repeat(1)),
                                    map(_MAX_OUTPUT, views))
        if any(at_limit):
            length_first = self._length_first
            for index in compress(range(len(stops)), at_limit):
                if emitted[index] and (stops[index] is None or length_first):
                    stops[index] = _LENGTH
        return stops

    def release_finished(self) -> None:
        """Free the blocks of every request that finished in this iteration."""
        if self._kv is not None:
            self._kv.end(self.finished)

    def build(self, duration: float) -> IterationResult:
        """The result; capacity facts come from the memory owner, if any."""
        plan = self._plan
        return IterationResult(
            decision_id=plan.decision_id,
            input_state_version=plan.input_state_version,
            completed=(Completed(self.completed) if self._columns is None
                       else Completed.with_columns(self.completed, self._columns)),
            failures=tuple(self.failures),
            service=dict(self._service),
            duration=duration,
            capacity=None if self._kv is None else self._kv.facts(),
            receipts=self._receipts,
            releases=self._releases,
        )
