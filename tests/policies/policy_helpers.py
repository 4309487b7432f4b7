"""Shared builders for the policy conformance tests (0x03, 0x05, 0x09, 0x0B, 0x0D).

Everything goes through the real code path: records, the registered
policies, the engine and the simulated executor. Every plan a test looks at
is validated against the run's workload bound to the policy identity.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from iterserve.engine.loop import Engine, bind_policy
from iterserve.engine.observer import EngineObserver
from iterserve.plan import Policy
from iterserve.policies.registry import policy_for
from iterserve.records.plan import IterationPlan, WorkItem
from iterserve.records.result import IterationResult
from iterserve.records.spec import (
    Capacity,
    HiddenTruth,
    OnlineWorkload,
    RequestSpec,
    WorkloadManifest,
)
from iterserve.records.state import CapacityFacts, RunRules, SchedulerState
from iterserve.records.transition import advance
from iterserve.records.validate import validate_plan, validate_result, validate_state
from iterserve.records.view import Lifecycle, RequestView, WorkKind
from iterserve.sim.executor import SimulatedExecutor
from iterserve.sim.factory import make_simulated_executor

FIXTURES = Path(__file__).resolve().parent / "fixtures"

Step = tuple[SchedulerState, IterationPlan, IterationResult, SchedulerState]


class Recorder(EngineObserver):
    """Keeps every (state, plan, result, successor) and re-validates each
    plan against the workload bound to the policy (independently of the
    engine's own validation switch)."""

    def __init__(self, workload: OnlineWorkload) -> None:
        self.workload = workload
        self.steps: list[Step] = []

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        validate_state(state)
        validate_plan(self.workload, state, plan)
        validate_result(plan, state, result)
        self.steps.append((state, plan, result, successor))

    @property
    def iterations(self) -> list[Step]:
        """Steps that ran model work (pure queue decisions left out)."""
        return [step for step in self.steps if step[1].work]


def manifest_of(requests: Iterable[RequestSpec], capacity: Capacity,
                realized: Mapping[str, int] | None = None,
                workload_id: str = "policy-test",
                policy_settings: Mapping[str, int] | None = None) -> WorkloadManifest:
    online = OnlineWorkload(workload_id, "iteration", capacity, tuple(requests),
                            policy_settings=dict(policy_settings or {}))
    return WorkloadManifest(online, HiddenTruth(dict(realized or {})))


def run_engine(manifest: WorkloadManifest, policy_name: str,
               max_iterations: int | None = None) -> tuple[Engine, Recorder]:
    """Run ``manifest`` under a registered policy with a recording observer."""
    policy = policy_for(policy_name, manifest.online)
    recorder = Recorder(bind_policy(manifest.online, policy))
    engine = Engine(manifest.online, policy, make_simulated_executor(manifest), [recorder])
    engine.run(max_iterations=max_iterations)
    return engine, recorder


def choose_validated(policy: Policy, workload: OnlineWorkload,
                     state: SchedulerState) -> tuple[OnlineWorkload, IterationPlan]:
    """One plan from ``policy`` on a hand-built state, validated."""
    bound = bind_policy(workload, policy)
    state = dataclasses.replace(state, rules=RunRules.of(workload))  # as the engine publishes it
    validate_state(state)
    plan = policy.choose(state)
    validate_plan(bound, state, plan)
    return bound, plan


def execute_and_advance(executor: SimulatedExecutor, plan: IterationPlan,
                        state: SchedulerState) -> SchedulerState:
    result = executor.execute(plan, state)
    validate_result(plan, state, result)
    return advance(state, plan, result)


def work_of(plan: IterationPlan, request_id: str) -> WorkItem | None:
    return next((w for w in plan.work if w.request_id == request_id), None)


def rows_by_kind(plan: IterationPlan) -> dict[WorkKind, int]:
    rows = dict.fromkeys(WorkKind, 0)
    for work in plan.work:
        rows[work.kind] += work.width
    return rows


def decoding_view(request_id: str, order: int, *, num_prompt: int, num_emitted: int,
                  priority: int = 0, max_output_tokens: int = 64,
                  snapshot_version: int = 5) -> RequestView:
    """A RUNNING request at its decode frontier: c == k == p + e - 1."""
    computed = num_prompt + num_emitted - 1
    return RequestView(
        request_id, 0, snapshot_version, "client", priority, float(order), order, num_prompt,
        max_output_tokens, num_emitted=num_emitted, num_computed=computed,
        num_committed=computed, lifecycle=Lifecycle.RUNNING, first_token_time=float(order),
        last_output_time=float(order),
    )


def waiting_view(request_id: str, order: int, *, num_prompt: int, priority: int = 0,
                 max_output_tokens: int = 64) -> RequestView:
    return RequestView(request_id, 0, 0, "client", priority, float(order), order, num_prompt,
                       max_output_tokens)


def state_of(views: Iterable[RequestView], *, max_num_batched_tokens: int, max_num_seqs: int,
             capacity: CapacityFacts | None = None, decision_id: int = 3,
             state_version: int = 9) -> SchedulerState:
    """A published cut holding ``views``; queues follow each view's lifecycle
    in the given order."""
    views = list(views)
    by_id = {view.request_id: view for view in views}
    return SchedulerState(
        decision_id=decision_id, state_version=state_version, now=float(decision_id),
        waiting=tuple(v.request_id for v in views if v.lifecycle is Lifecycle.WAITING),
        running=tuple(v.request_id for v in views if v.lifecycle is Lifecycle.RUNNING),
        suspended=(), finished=(), views=by_id, max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs, capacity=capacity or CapacityFacts(),
    )


def workload_for(state: SchedulerState, capacity: Capacity) -> OnlineWorkload:
    """The online declarations behind a hand-built state."""
    requests = tuple(
        RequestSpec(v.request_id, v.arrival, v.num_prompt_tokens, v.max_output_tokens,
                    client_id=v.client_id, priority=v.priority)
        for v in sorted(state.views.values(), key=lambda v: v.arrival_order)
    )
    return OnlineWorkload("hand-built", "iteration", capacity, requests)


def write_workload(path: Path, requests: list[dict[str, Any]], capacity: dict[str, int],
                   realized: Mapping[str, int] | None = None) -> Path:
    obj: dict[str, Any] = {
        "workload_id": path.stem, "clock": "iteration", "capacity": capacity,
        "requests": requests,
    }
    if realized:
        obj["fixture_only_hidden_truth"] = {"realized_output_tokens": dict(realized)}
    path.write_text(json.dumps(obj, indent=1))
    return path
