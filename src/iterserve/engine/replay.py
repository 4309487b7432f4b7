"""Replay: re-derive every plan and state of a decision log (DESIGN rule 6).

The engine loop runs again with the logged policy; a replay executor returns
the logged results instead of executing. Each step compares the input state's
digest and the re-derived plan with the log and stops at the first
divergence, naming it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iterserve.engine.decision_log import LOG_FORMAT
from iterserve.engine.loop import Engine
from iterserve.policies.registry import make_policy
from iterserve.records.codec import (
    capacity_from_json,
    dumps,
    plan_to_json,
    result_from_json,
    state_digest,
)
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.sim.workload import parse_workload


class ReplayDivergence(RuntimeError):
    """The log and the re-derivation disagree; the message names where."""


@dataclass(frozen=True, slots=True)
class ReplayReport:
    num_iterations: int
    policy_id: str
    policy_version: str


class _LoggedExecutor:
    """Returns logged results in order; checks each belongs to the live plan."""

    def __init__(self, lines: Iterator[dict[str, Any]], capacity: CapacityFacts) -> None:
        self._lines = lines
        self._capacity = capacity

    def capacity(self) -> CapacityFacts:
        return self._capacity

    def execute(self, plan: IterationPlan, state: SchedulerState) -> IterationResult:
        line = next(self._lines, None)
        if line is None:
            raise ReplayDivergence(
                f"decision {state.decision_id}: the policy scheduled work but the log has ended"
            )
        _compare(line, state, plan)
        return result_from_json(line["result"])

    def release(self, request_ids: Iterable[str]) -> None:
        return None


def _compare(line: dict[str, Any], state: SchedulerState, plan: IterationPlan) -> None:
    where = f"decision {line.get('decision_id')}"
    if line.get("decision_id") != state.decision_id:
        raise ReplayDivergence(f"{where}: replay is at decision {state.decision_id}")
    if line.get("state_version") != state.state_version:
        raise ReplayDivergence(
            f"{where}: state_version logged {line.get('state_version')}, replayed {state.state_version}"
        )
    if line.get("state_digest") != state_digest(state):
        raise ReplayDivergence(f"{where}: state_digest differs from the replayed state")
    derived = plan_to_json(plan)
    logged = line.get("plan")
    if dumps(logged) != dumps(derived):
        field = _first_difference(logged, derived)
        raise ReplayDivergence(f"{where}: plan differs at {field}")


def _first_difference(logged: Any, derived: Any, path: str = "plan") -> str:
    if isinstance(logged, dict) and isinstance(derived, dict):
        for key in sorted(set(logged) | set(derived)):
            if key not in logged or key not in derived or dumps(logged[key]) != dumps(derived[key]):
                return _first_difference(logged.get(key), derived.get(key), f"{path}.{key}")
    if isinstance(logged, list) and isinstance(derived, list):
        for i, (a, b) in enumerate(zip(logged, derived, strict=False)):
            if dumps(a) != dumps(b):
                return _first_difference(a, b, f"{path}[{i}]")
        if len(logged) != len(derived):
            return f"{path} (logged {len(logged)} items, derived {len(derived)})"
    return f"{path} (logged {dumps(logged)}, derived {dumps(derived)})"


def read_log(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = []
    with Path(path).open() as stream:
        for number, text in enumerate(stream, 1):
            if text.strip():
                try:
                    lines.append(json.loads(text))
                except json.JSONDecodeError as exc:
                    raise ReplayDivergence(f"line {number}: not valid JSON ({exc.msg})") from None
    if not lines or lines[0].get("type") != "header":
        raise ReplayDivergence("line 1: missing decision-log header")
    if lines[0].get("format") != LOG_FORMAT:
        raise ReplayDivergence(f"line 1: unsupported log format {lines[0].get('format')}")
    return lines[0], lines[1:]


def replay(path: Path) -> ReplayReport:
    header, body = read_log(path)
    policy = make_policy(header["policy"]["id"])
    if policy.policy_version != header["policy"]["version"]:
        raise ReplayDivergence(
            f"header: log policy {header['policy']['id']}@{header['policy']['version']}, "
            f"installed version is {policy.policy_version}"
        )
    manifest = parse_workload(header["workload"])
    executor = _LoggedExecutor(iter(body), capacity_from_json(header["initial_capacity"]))
    engine = Engine(manifest.online, policy, executor)
    engine.run()
    if engine.num_iterations != len(body):
        raise ReplayDivergence(
            f"decision {body[engine.num_iterations]['decision_id']}: the log continues "
            f"but the replayed run finished after {engine.num_iterations} iterations"
        )
    return ReplayReport(engine.num_iterations, policy.policy_id, policy.policy_version)
