"""Decision log: one canonical JSON line per iteration (DESIGN rule 6).

Line 1 is a header with the online workload (never hidden truth), the
policy identity and its settings (``policy_settings``, which replay makes
the policy with), the run's cost model (``NAME:params``, which a deadline
policy plans with) and its overload contract (``gate``: id and params, or
null). Later lines, in the order the facts happened:

- ``iteration``: decision id, the input state's version and digest, the plan
  and the result, and ``rejected`` ([[request_id, reason], ...], present when
  the arrival gate rejected requests since the previous line);
- ``cancel``: a client cancellation between iterations, with the decision id
  and state version it was applied at and the capacity facts after it (and
  ``rejected`` likewise);
- ``summary`` (written by :meth:`DecisionLogWriter.close` only when the run
  stopped before it was done, or rejections happened after the last line):
  the state version the run ended at and the trailing ``rejected``.

Rejections are not replayed from the log: replay re-derives them from the
gate and checks they match these lists. ``iterserve replay`` re-derives
every plan and state from this file alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from iterserve.engine.observer import EngineObserver
from iterserve.records.codec import (
    capacity_to_json,
    dumps,
    plan_to_json,
    result_to_json,
    state_digest,
)
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.spec import OnlineWorkload, RequestSpec
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.sim.workload import online_to_json

LOG_FORMAT = 2
READABLE_FORMATS = (1, 2)  # format 1: no cost model, gate or cancel lines


@dataclass(frozen=True, slots=True)
class GateRecord:
    """An overload contract as the header records it (``make_gate`` input)."""

    gate_id: str
    params: Mapping[str, Any] = field(default_factory=dict)


def header_line(workload: OnlineWorkload, capacity: CapacityFacts, *,
                cost_model: str | None = None, gate: GateRecord | None = None,
                policy_settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    assert workload.policy is not None, "bind the policy before logging"
    return {
        "type": "header",
        "format": LOG_FORMAT,
        "initial_capacity": capacity_to_json(capacity),
        "policy": {"id": workload.policy.policy_id, "version": workload.policy.policy_version},
        "policy_settings": dict(policy_settings or {}),
        "cost_model": cost_model,
        "gate": None if gate is None else {"id": gate.gate_id, "params": dict(gate.params)},
        "workload": online_to_json(workload),
    }


def iteration_line(
    state: SchedulerState, plan: IterationPlan, result: IterationResult
) -> dict[str, Any]:
    line = {
        "type": "iteration",
        "decision_id": state.decision_id,
        "state_version": state.state_version,
        "state_digest": state_digest(state),
        "policy": {"id": plan.policy_id, "version": plan.policy_version},
        "plan": plan_to_json(plan),
        "result": result_to_json(result),
    }
    if state.prefix_hits:  # the memory owner's facts this plan read (replay publishes them)
        line["prefix_hits"] = dict(sorted(state.prefix_hits.items()))
    return line


def cancel_line(request_id: str, state: SchedulerState,
                successor: SchedulerState) -> dict[str, Any]:
    """A cancellation at ``state``; ``capacity`` is the successor's facts
    (the executor freed the request's memory)."""
    return {"type": "cancel", "decision_id": state.decision_id,
            "state_version": state.state_version, "request_id": request_id,
            "capacity": capacity_to_json(successor.capacity)}


class DecisionLogWriter(EngineObserver):
    """An engine observer that streams the log to an open text file."""

    def __init__(self, stream: IO[str], workload: OnlineWorkload, capacity: CapacityFacts, *,
                 cost_model: str | None = None, gate: GateRecord | None = None,
                 policy_settings: Mapping[str, Any] | None = None) -> None:
        self._stream = stream
        self._rejected: list[list[str]] = []  # since the last line
        self._write(header_line(workload, capacity, cost_model=cost_model, gate=gate,
                                policy_settings=policy_settings))

    def _write(self, line: dict[str, Any]) -> None:
        if self._rejected:
            line["rejected"] = self._rejected
            self._rejected = []
        self._stream.write(dumps(line) + "\n")

    def on_reject(self, spec: RequestSpec, reason: str, now: float) -> None:
        self._rejected.append([spec.request_id, reason])

    def on_cancel(self, request_id: str, state: SchedulerState, successor: SchedulerState) -> None:
        self._write(cancel_line(request_id, state, successor))

    def on_step(
        self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
        successor: SchedulerState,
    ) -> None:
        # every plan reaches the executor, intent-only ones too (their result
        # carries capacity facts: a preemption frees memory), so each is logged
        self._write(iteration_line(state, plan, result))

    def close(self, state: SchedulerState, *, is_done: bool = True) -> None:
        """End the log. A run that stopped early (``is_done`` False) or left
        rejections unwritten gets a ``summary`` line saying where it ended."""
        if self._rejected or not is_done:
            self._write({"type": "summary", "decision_id": state.decision_id,
                         "state_version": state.state_version, "is_done": is_done})
