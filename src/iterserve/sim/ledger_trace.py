"""The client ledger per decision (0x09A): the accounting transaction made visible.

For each decision of a run whose policy keeps a client ledger: the VTC
counters and W_done at the plan's input state, the provisional C_select each
client reached by the plan's selections (W_done + the predicted weighted
cost of its selected intervals), the requests whose work failed, and both
counters after the validated result. C_select after reconciliation is the
new W_done: a failed event's reservation is rolled back, a completed one is
replaced by its actual charge (completion_reconciled_vtc_teaching_v1).
"""

from __future__ import annotations

from typing import Any

from iterserve.engine.observer import EngineObserver
from iterserve.policies.starvation_guard import GUARD_REASON
from iterserve.records.ledger import counter_spread, interval_cost
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.state import SchedulerState

MAX_TRACE_DECISIONS = 200


class LedgerTrace(EngineObserver):
    def __init__(self, max_decisions: int = MAX_TRACE_DECISIONS) -> None:
        self.entries: list[dict[str, Any]] = []
        self.max_decisions = max_decisions
        self.num_decisions = 0
        self.guard_firings: list[dict[str, Any]] = []
        # F58: the widest counter spread over the active clients at any
        # decision taken while a request waits (the queue is nonempty)
        self.max_counter_spread: dict[str, Any] | None = None

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        ledger, after = state.ledger, successor.ledger
        if ledger is None or after is None:
            return
        self.num_decisions += 1
        if state.waiting:
            self._note_spread(state)
        for intent in plan.intents:
            if intent.reason.startswith(GUARD_REASON):
                self.guard_firings.append({
                    "decision_id": plan.decision_id, "now": state.now,
                    "request_id": intent.request_id, "intent": intent.kind.value,
                    "reason": intent.reason})
        if len(self.entries) >= self.max_decisions:
            return
        reserved: dict[str, float] = {}
        for work in plan.work:
            view = state.views[work.request_id]
            cost = interval_cost(ledger.weights, view, work.start, work.end)
            reserved[view.client_id] = reserved.get(view.client_id, ledger.done_of(
                view.client_id)) + cost
        self.entries.append({
            "decision_id": plan.decision_id,
            "now": state.now,
            "counters": dict(sorted(ledger.counters.items())),
            "w_done": dict(sorted(ledger.done.items())),
            "c_select_reserved": dict(sorted(reserved.items())),
            "failed": sorted(failure.request_id for failure in result.failures),
            "counters_after": dict(sorted(after.counters.items())),
            "w_done_after": dict(sorted(after.done.items())),
        })

    def _note_spread(self, state: SchedulerState) -> None:
        ledger = state.ledger
        assert ledger is not None
        active = state.active_clients()
        spread = counter_spread(ledger, active)
        held = self.max_counter_spread
        if held is None or spread > held["value"]:
            self.max_counter_spread = {
                "value": spread, "decision_id": state.decision_id, "now": state.now,
                "counters": {c: ledger.counter(c) for c in sorted(active)}}

    def to_dict(self) -> dict[str, Any]:
        return {"decisions": self.entries, "num_decisions": self.num_decisions,
                "truncated": self.num_decisions > len(self.entries),
                "max_counter_spread": self.max_counter_spread}

    def guard_dict(self, horizon: float) -> dict[str, Any]:
        """How often the starvation guard fired, and each firing (capped)."""
        return {"horizon": horizon, "num_fired": len(self.guard_firings),
                "firings": self.guard_firings[: self.max_decisions]}
