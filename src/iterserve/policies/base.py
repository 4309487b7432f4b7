"""Policy interface and the shared plan-building mechanism.

A policy orders and chooses; :class:`PlanBuilder` is the mechanism every
policy shares: it clamps each request to its only legal interval (0x01A),
keeps the token and sequence ledgers (0x05), records tie-break evidence and
emits the plan in key order. A policy never builds a ``WorkItem`` by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from iterserve.records.keys import key_function
from iterserve.records.plan import IntentKind, IterationPlan, QueueIntent, WorkItem
from iterserve.records.spec import OnlineWorkload
from iterserve.records.state import SchedulerState
from iterserve.records.view import RequestView, WorkKind


@dataclass(frozen=True, slots=True)
class PolicyContract:
    """A paper contract record (0x0E): what the policy claims and assumes."""

    granularity: str
    protected_identity: str
    visible_state: str
    decision_output: str
    unknown_future: str
    objective: str
    metric: str
    assumptions: str
    foreign_owners: str
    source: str
    exact_runtime_reproduction: bool = False


class Policy(Protocol):
    """Chooses one plan from one state; pure and deterministic (DESIGN rule 6)."""

    policy_id: str
    policy_version: str
    tie_break_key: tuple[str, ...]
    contract: PolicyContract

    def choose(self, workload: OnlineWorkload, state: SchedulerState) -> IterationPlan: ...


class PlanBuilder:
    """Accumulates legal work under both budgets for one state."""

    __slots__ = ("_state", "_policy", "_key", "_work", "_intents", "tokens_left", "seqs_left", "_chosen")

    def __init__(self, policy: Policy, state: SchedulerState) -> None:
        self._state = state
        self._policy = policy
        self._key = key_function(policy.tie_break_key, state)
        self._work: list[WorkItem] = []
        self._intents: list[QueueIntent] = []
        self._chosen: set[str] = set()
        self.tokens_left = state.token_budget
        self.seqs_left = state.sequence_budget

    def can_add(self) -> bool:
        return self.tokens_left > 0 and self.seqs_left > 0

    def add(self, view: RequestView, max_rows: int | None = None) -> int:
        """Schedule up to ``max_rows`` of ``view``'s legal interval; rows granted.

        Decode is exactly one row; prefill and rebuild take
        min(remaining, max_rows, tokens left). Zero when nothing fits.
        """
        rid = view.request_id
        if rid in self._chosen or not view.is_ready or self.seqs_left == 0:
            return 0
        c = view.num_computed
        e = view.num_emitted
        remaining = view.num_prompt_tokens - c if e == 0 else view.num_prompt_tokens + e - 1 - c
        if remaining == 0:  # decoding: the only legal interval is [c, c+1)
            rows, kind = 1, WorkKind.DECODE_ROW
        else:
            rows = remaining
            kind = WorkKind.PREFILL_CHUNK if e == 0 else WorkKind.REBUILD
        if max_rows is not None and max_rows < rows:
            rows = max_rows
        if rows > self.tokens_left:
            rows = self.tokens_left
        if rows <= 0:
            return 0
        end = c + rows
        self._work.append(WorkItem(rid, view.generation, view.snapshot_version, c, end, kind,
                                   range(c, end), self._key(view)))
        self._chosen.add(rid)
        self.tokens_left -= rows
        self.seqs_left -= 1
        return rows

    def intend(self, kind: IntentKind, view: RequestView, reason: str = "") -> None:
        self._intents.append(QueueIntent(kind, view.request_id, view.generation, reason))

    def admit(self, view: RequestView, max_rows: int | None = None) -> int:
        """Admit a waiting request and schedule its first interval."""
        rows = self.add(view, max_rows)
        if rows:
            self.intend(IntentKind.ADMIT, view)
        return rows

    def is_chosen(self, request_id: str) -> bool:
        return request_id in self._chosen

    @property
    def num_scheduled(self) -> int:
        return len(self._work)

    def build(self) -> IterationPlan:
        work = sorted(self._work, key=lambda item: item.tie_break)
        return IterationPlan(
            decision_id=self._state.decision_id,
            input_state_version=self._state.state_version,
            policy_id=self._policy.policy_id,
            policy_version=self._policy.policy_version,
            work=tuple(work),
            tokens_used=self._state.token_budget - self.tokens_left,
            sequences_used=len(work),
            tie_break_key=self._policy.tie_break_key,
            intents=tuple(self._intents),
        )


def views_of(state: SchedulerState, request_ids: tuple[str, ...]) -> list[RequestView]:
    views = state.views
    return [views[rid] for rid in request_ids]
