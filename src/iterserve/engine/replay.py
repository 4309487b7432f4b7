"""Replay: re-derive every plan and state of a decision log (DESIGN rule 6).

The engine runs again with the logged policy (bound to the logged cost
model) and the logged overload contract, one step at a time; a replay
executor returns the logged results instead of executing. Logged
cancellations are applied at the state version they were made at;
rejections are re-derived by the gate and must match the logged lists.
Each step compares the input state's digest and the re-derived plan with the
log and stops at the first divergence, naming it; a logged result that fails
validation is a divergence at its decision too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iterserve.admission.overload import OverloadConfigError, engine_gate, make_gate
from iterserve.engine.decision_log import READABLE_FORMATS
from iterserve.engine.loop import ArrivalGate, Engine
from iterserve.plan import Policy
from iterserve.policies.deadline import bind_cost_model
from iterserve.policies.registry import bind_fairness, make_policy, settings_for
from iterserve.policies.settings import PolicyConfigError
from iterserve.records.codec import (
    capacity_from_json,
    dumps,
    plan_to_json,
    result_from_json,
    state_digest,
)
from iterserve.records.errors import ContractViolation
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.spec import OnlineWorkload
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.sim.cost import CostModelError, parse_cost_model
from iterserve.sim.workload import parse_workload


class ReplayDivergence(RuntimeError):
    """The log and the re-derivation disagree; the message names where."""


@dataclass(frozen=True, slots=True)
class ReplayReport:
    num_iterations: int
    policy_id: str
    policy_version: str


class _LogCursor:
    """The body lines in order; replay consumes them as it re-derives the run."""

    def __init__(self, lines: list[dict[str, Any]]) -> None:
        self._lines = lines
        self.index = 0

    def peek(self) -> dict[str, Any] | None:
        return self._lines[self.index] if self.index < len(self._lines) else None

    def take(self) -> dict[str, Any]:
        line = self._lines[self.index]
        self.index += 1
        return line


class _LoggedExecutor:
    """Answers each plan with the next logged iteration line; checks that
    line belongs to the live plan and that the rejections re-derived since
    the previous line match its ``rejected`` list."""

    def __init__(self, cursor: _LogCursor, capacity: CapacityFacts,
                 check_rejections: Callable[[dict[str, Any]], None]) -> None:
        self._cursor = cursor
        self._capacity = capacity
        self._check_rejections = check_rejections

    def capacity(self) -> CapacityFacts:
        return self._capacity

    def released(self, capacity: CapacityFacts) -> None:
        """A logged cancellation's capacity facts: what the real executor
        reported after freeing the request's memory."""
        self._capacity = capacity

    def prefix_hits(self, state: SchedulerState) -> dict[str, int]:
        """The prefix-hit facts the logged decision read (the state digest
        binds them, so a forged list fails the comparison)."""
        line = self._cursor.peek()
        if line is None or line.get("type") != "iteration":
            return {}
        hits = line.get("prefix_hits", {})
        if not isinstance(hits, dict):
            raise ReplayDivergence(f"decision {line.get('decision_id')}: prefix_hits "
                                   "must be an object")
        return {str(rid): int(rows) for rid, rows in hits.items()}

    def execute(self, plan: IterationPlan, state: SchedulerState) -> IterationResult:
        line = self._cursor.peek()
        if line is None or line.get("type") != "iteration":
            what = "the log has ended" if line is None else f"the log has a {line.get('type')} line"
            raise ReplayDivergence(
                f"decision {state.decision_id}: the policy scheduled work but {what}"
            )
        self._cursor.take()
        _compare(line, state, plan)
        self._check_rejections(line)
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
    if lines[0].get("format") not in READABLE_FORMATS:
        raise ReplayDivergence(f"line 1: unsupported log format {lines[0].get('format')}")
    return lines[0], lines[1:]


def _policy(header: dict[str, Any], workload: OnlineWorkload) -> Policy:
    """The logged policy made with the logged settings (a log written before
    the header recorded them: the workload's, as that run read them)."""
    name = header["policy"]["id"]
    settings = header.get("policy_settings")
    try:
        if settings is None:
            settings = settings_for(name, workload, strict=False)
        policy = make_policy(name, **settings)
    except PolicyConfigError as exc:
        raise ReplayDivergence(f"header: policy cannot be rebuilt ({exc})") from None
    if policy.policy_version != header["policy"]["version"]:
        raise ReplayDivergence(
            f"header: log policy {header['policy']['id']}@{header['policy']['version']}, "
            f"installed version is {policy.policy_version}"
        )
    spec = header.get("cost_model")
    if spec is None:
        return policy
    try:
        return bind_cost_model(policy, parse_cost_model(str(spec)))
    except CostModelError as exc:
        raise ReplayDivergence(f"header: cost model cannot be rebuilt ({exc})") from None


def _gate(header: dict[str, Any]) -> ArrivalGate | None:
    record = header.get("gate")
    if record is None:
        return None
    try:
        return engine_gate(make_gate(str(record.get("id")), record.get("params")))
    except (OverloadConfigError, CostModelError) as exc:
        raise ReplayDivergence(f"header: gate {record.get('id')!r} cannot be rebuilt ({exc})") \
            from None


class _Replay:
    """Drives the engine step by step, applying logged cancellations at the
    state version they were made at and checking every rejection list."""

    def __init__(self, header: dict[str, Any], body: list[dict[str, Any]]) -> None:
        manifest = parse_workload(header["workload"])
        self.policy = bind_fairness(_policy(header, manifest.online), manifest.online.fairness)
        self.cursor = _LogCursor(body)
        self.executor = _LoggedExecutor(
            self.cursor, capacity_from_json(header["initial_capacity"]), self._check_rejections)
        self.engine = Engine(manifest.online, self.policy, self.executor, gate=_gate(header))
        self._num_rejected_checked = 0

    def _check_rejections(self, line: dict[str, Any]) -> None:
        derived = [[rid, reason] for rid, reason in self.engine.rejected.items()]
        new = derived[self._num_rejected_checked:]
        self._num_rejected_checked = len(derived)
        logged = line.get("rejected", [])
        if dumps(logged) != dumps(new):
            raise ReplayDivergence(
                f"decision {line.get('decision_id')}: rejections differ: logged {dumps(logged)}, "
                f"re-derived {dumps(new)}"
            )

    def _apply_due_lines(self) -> bool:
        """Apply the cancel lines logged at the engine's current cut; True
        when the summary line that ends the original run is reached."""
        state = self.engine.state
        while (line := self.cursor.peek()) is not None and line.get("type") != "iteration":
            if line.get("type") not in ("cancel", "summary"):
                raise ReplayDivergence(f"decision {line.get('decision_id')}: unknown line type "
                                       f"{line.get('type')!r}")
            logged_version = line.get("state_version", -1)
            if logged_version > state.state_version:
                return False
            if logged_version < state.state_version:
                raise ReplayDivergence(
                    f"decision {line.get('decision_id')}: the log has a {line.get('type')} line "
                    f"at state_version {logged_version}, replay is at {state.state_version}"
                )
            self.cursor.take()
            self._check_rejections(line)
            if line.get("type") == "summary":
                return True
            self._cancel(line)
            state = self.engine.state
        return False

    def _cancel(self, line: dict[str, Any]) -> None:
        """A logged cancellation; only a live request's is ever logged."""
        request_id = str(line.get("request_id"))
        view = self.engine.state.views.get(request_id)
        if view is None or view.is_terminal:
            raise ReplayDivergence(
                f"decision {line.get('decision_id')}: the log cancels {request_id!r}, "
                f"which is not live in the replayed state"
            )
        if "capacity" in line:
            self.executor.released(capacity_from_json(line["capacity"]))
        self.engine.cancel(request_id)

    def run(self) -> None:
        engine = self.engine
        while not self._apply_due_lines() and not engine.is_done:
            try:
                engine.step()
            except ContractViolation as exc:
                raise ReplayDivergence(
                    f"decision {engine.state.decision_id}: logged result rejected "
                    f"({exc.code}): {exc}"
                ) from None
        line = self.cursor.peek()
        if line is not None:
            raise ReplayDivergence(
                f"decision {line.get('decision_id')}: the log continues but the replayed run "
                f"ended after {engine.num_iterations} iterations"
            )
        self._check_rejections({"decision_id": engine.state.decision_id, "rejected": []})


def replay(path: Path) -> ReplayReport:
    header, body = read_log(path)
    run = _Replay(header, body)
    run.run()
    policy = run.policy
    return ReplayReport(run.engine.num_iterations, policy.policy_id, policy.policy_version)
