"""Decision log: one canonical JSON line per iteration (DESIGN rule 6).

Line 1 is a header with the online workload (never hidden truth) and the
policy identity; every later line holds the decision id, the input state's
version and digest, the plan and the result. ``iterserve replay`` re-derives
every plan and state from this file alone.
"""

from __future__ import annotations

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
from iterserve.records.spec import OnlineWorkload
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.sim.workload import online_to_json

LOG_FORMAT = 1


def header_line(workload: OnlineWorkload, capacity: CapacityFacts) -> dict[str, Any]:
    assert workload.policy is not None, "bind the policy before logging"
    return {
        "type": "header",
        "format": LOG_FORMAT,
        "initial_capacity": capacity_to_json(capacity),
        "policy": {"id": workload.policy.policy_id, "version": workload.policy.policy_version},
        "workload": online_to_json(workload),
    }


def iteration_line(
    state: SchedulerState, plan: IterationPlan, result: IterationResult
) -> dict[str, Any]:
    return {
        "type": "iteration",
        "decision_id": state.decision_id,
        "state_version": state.state_version,
        "state_digest": state_digest(state),
        "policy": {"id": plan.policy_id, "version": plan.policy_version},
        "plan": plan_to_json(plan),
        "result": result_to_json(result),
    }


class DecisionLogWriter(EngineObserver):
    """An engine observer that streams the log to an open text file."""

    def __init__(self, stream: IO[str], workload: OnlineWorkload,
                 capacity: CapacityFacts) -> None:
        self._stream = stream
        stream.write(dumps(header_line(workload, capacity)) + "\n")

    def on_step(
        self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
        successor: SchedulerState,
    ) -> None:
        if not plan.work:  # a pure queue decision is no iteration; replay re-derives it
            return
        self._stream.write(dumps(iteration_line(state, plan, result)) + "\n")
