"""Replay: re-derive every plan, state and result of a decision log (DESIGN rule 6).

The engine runs again with the logged policy (bound to the logged cost
model) and the logged overload contract, one step at a time. Each step
compares the input state's digest and the re-derived plan with the log and
stops at the first divergence, naming its line and field (the digest of
the log's format: format 4's for formats 4 to 6, or the whole-text digest of
formats 1 to 3).
Results come from one of two places:

- a simulated run replayed with its workload file (``workload``): the
  simulated executor runs again with the header's cost model and the file's
  hidden truth, whose digest must match the header's; every result
  (tokens, stops, durations, capacity facts) is re-derived and compared;
- otherwise the logged results are used as they are, after their chain
  link is checked (formats 3 to 6): an edited line breaks the chain there.

Logged cancellations, and the requests an online engine took in while it
ran (``arrival`` lines), are applied at the state version they were made at;
rejections are re-derived by the gate and must match the logged lists. A
logged result that fails validation is a divergence at its line too.

The log is read as the replay goes (:func:`~iterserve.engine.log_reader.open_log`,
one line of lookahead), so a replay holds the run's live state, not its
history; a malformed line is named when the replay reaches it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iterserve.engine.decision_log import CHAIN_KEY, STATE_DIGESTS, chain_digest
from iterserve.engine.log_reader import (
    DecisionLogFile,
    LogLine,
    MalformedLog,
    ReplayDivergence,
    open_log,
    read_log,
)
from iterserve.engine.loop import Engine
from iterserve.policies.registry import bind_fairness
from iterserve.records.codec import (
    capacity_from_json,
    capacity_to_json,
    dumps,
    plan_to_json,
    result_from_json,
    result_to_json,
)
from iterserve.records.errors import ContractViolation
from iterserve.records.failures import failure_label
from iterserve.records.plan import IterationPlan
from iterserve.records.prefix_claims import NO_CLAIMS, PrefixClaims
from iterserve.records.result import IterationResult
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.records.state_digest import StateDigester, state_digest
from iterserve.records.view import Lifecycle
from iterserve.sim.executor import SimulatedExecutor
from iterserve.sim.replay_header import (
    arrival_requests,
    header_manifest,
    rebuild_gate,
    rebuild_policy,
    rebuild_simulated_executor,
)

__all__ = ["MalformedLog", "ReplayDivergence", "ReplayReport", "read_log", "replay"]


@dataclass(frozen=True, slots=True)
class ReplayReport:
    num_iterations: int
    policy_id: str
    policy_version: str
    results_check: str  # how the results were checked, for the success line


class _Chain:
    """Checks each line's chain link in file order (formats 3 to 6)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._previous = ""

    def verify(self, line: LogLine) -> None:
        if not self.enabled:
            return
        fields = dict(line.fields)
        logged = fields.pop(CHAIN_KEY)
        if logged != chain_digest(self._previous, dumps(fields)):
            what = ("a header field (policy, cost_model, gate, workload, executor, "
                    "output_lengths_sha256, ...) was edited" if line.kind == "header" else
                    "the line was edited after it was written, or one before it was "
                    "dropped or moved")
            raise ReplayDivergence(f"{line.where}: chain does not match: {what}")
        self._previous = logged


class _LogCursor:
    """The body lines in order, read as replay consumes them: one line of
    lookahead (:meth:`peek`) and the last line taken, never the log."""

    def __init__(self, lines: Iterable[LogLine], chain: _Chain) -> None:
        self._lines = iter(lines)
        self._chain = chain
        self._next: LogLine | None = None  # the line peek read ahead, if it did
        self._has_next = False
        self._last: LogLine | None = None
        self._last_number_read = 1  # the last line read from the file (the header's: 1)

    def peek(self) -> LogLine | None:
        if not self._has_next:
            self._next = next(self._lines, None)
            self._has_next = True
            if self._next is not None:
                self._last_number_read = self._next.number
        return self._next

    def take(self) -> LogLine:
        line = self.peek()
        if line is None:
            raise IndexError("take past the end of the log")
        self._has_next, self._next, self._last = False, None, line
        return line

    def verify(self, line: LogLine) -> None:
        self._chain.verify(line)

    @property
    def last(self) -> LogLine | None:
        return self._last

    @property
    def end_where(self) -> str:
        """The line after the log's last line (its end); the lines not yet
        taken are read to find it, without being kept."""
        for line in self._lines:
            self._last_number_read = line.number
        self._has_next, self._next = True, None
        return f"line {self._last_number_read + 1} (end of log)"


class _ReplayExecutor:
    """Answers each plan with the next logged iteration line (checked
    against the live plan and state), or, given a simulated executor,
    re-runs it and compares its result with the logged one."""

    def __init__(self, cursor: _LogCursor, capacity: CapacityFacts,
                 check_rejections: Callable[[LogLine], None],
                 simulated: SimulatedExecutor | None,
                 digest: Callable[[SchedulerState], str]) -> None:
        self._cursor = cursor
        self._digest = digest  # the log format's state digest
        self._capacity = capacity
        self._check_rejections = check_rejections
        self._simulated = simulated

    def capacity(self) -> CapacityFacts:
        return self._capacity if self._simulated is None else self._simulated.capacity()

    def released(self, capacity: CapacityFacts) -> None:
        """A logged cancellation's capacity facts: what the real executor
        reported after freeing the request's memory."""
        self._capacity = capacity

    def prefix_hits(self, state: SchedulerState) -> dict[str, int]:
        """The prefix-hit facts the decision read: re-derived by the simulated
        executor, else the logged ones (the state digest binds them)."""
        if self._simulated is not None:
            return self._simulated.prefix_hits(state)
        line = self._cursor.peek()
        if line is None or line.kind != "iteration":
            return {}
        return dict(line.fields.get("prefix_hits", {}))

    def execute(self, plan: IterationPlan, state: SchedulerState) -> IterationResult:
        line = self._cursor.peek()
        if line is None or line.kind != "iteration":
            where = self._cursor.end_where if line is None else line.where
            what = "the log has ended" if line is None else f"the log has a {line.kind} line"
            raise ReplayDivergence(f"{where}: the policy scheduled work at decision "
                                   f"{state.decision_id} but {what}")
        self._cursor.take()
        _compare(line, state, plan, self._digest)
        result = self._result(line, plan, state)
        self._check_rejections(line)
        self._cursor.verify(line)
        return result

    def _result(self, line: LogLine, plan: IterationPlan,
                state: SchedulerState) -> IterationResult:
        if self._simulated is None:
            return result_from_json(line.record["result"], plan, state)
        derived = self._simulated.execute(plan, state)
        _compare_json(line, "result", line.record["result"],
                      result_to_json(derived, plan, state))
        return derived

    def claim_prefix_hits(self, state: SchedulerState) -> PrefixClaims:
        """The hits the simulated executor claims, or the next iteration
        line's ``claimed_prefix_rows`` (and ``reclaimed_prefix_blocks``) not
        yet in the state (0x0E)."""
        if self._simulated is not None:
            return self._simulated.claim_prefix_hits(state)
        line = self._cursor.peek()
        if line is None or line.kind != "iteration":
            return NO_CLAIMS
        views = state.views
        rows = {rid: int(rows) for rid, rows in line.fields.get("claimed_prefix_rows", {}).items()
                if rid in views and views[rid].lifecycle is Lifecycle.WAITING
                and not views[rid].num_computed and not views[rid].num_emitted}
        reclaimed = {rid: int(blocks) for rid, blocks
                     in line.fields.get("reclaimed_prefix_blocks", {}).items() if rid in rows}
        return PrefixClaims(rows, reclaimed) if rows else NO_CLAIMS

    def release(self, request_ids: Iterable[str]) -> None:
        if self._simulated is not None:
            self._simulated.release(request_ids)


def _state_digest(log_format: int) -> Callable[[SchedulerState], str]:
    """The log format's state digest for one replay: where it is
    :func:`state_digest` (formats 4 and 5), an incremental digester (it
    follows the replayed states in order; the same value as the reference),
    else the format's reference function."""
    digest = STATE_DIGESTS[log_format]
    return StateDigester().digest if digest is state_digest else digest


def _compare(line: LogLine, state: SchedulerState, plan: IterationPlan,
             digest: Callable[[SchedulerState], str]) -> None:
    fields = line.fields
    if fields["decision_id"] != state.decision_id:
        raise ReplayDivergence(f"{line.where}: replay is at decision {state.decision_id}")
    if fields["state_version"] != state.state_version:
        raise ReplayDivergence(f"{line.where}: state_version logged {fields['state_version']}, "
                               f"replayed {state.state_version}")
    if fields["state_digest"] != digest(state):
        raise ReplayDivergence(f"{line.where}: state_digest differs from the replayed state")
    _compare_json(line, "plan", line.record["plan"], plan_to_json(plan))
    _compare_json(line, "policy", fields["policy"],
                  {"id": plan.policy_id, "version": plan.policy_version})


def _compare_json(line: LogLine, name: str, logged: Any, derived: Any) -> None:
    if dumps(logged) != dumps(derived):
        raise ReplayDivergence(
            f"{line.where}: {name} differs at {_first_difference(logged, derived, name)}")


def _first_difference(logged: Any, derived: Any, path: str) -> str:
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
    return f"{path} (logged {_short(logged)}, derived {_short(derived)})"


def _short(value: Any) -> str:
    text = dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- the run ---------------------------------------------------------------------------
class _Replay:
    """Drives the engine step by step, applying logged cancellations at the
    state version they were made at and checking every rejection list."""

    def __init__(self, log: DecisionLogFile, workload_path: Path | None) -> None:
        header = log.header
        manifest = header_manifest(header)
        self.policy = bind_fairness(rebuild_policy(header, manifest.online),
                                    manifest.online.fairness)
        gate = rebuild_gate(header)
        simulated = (None if workload_path is None
                     else rebuild_simulated_executor(header, manifest, workload_path))
        chain = _Chain(log.has_chain)
        chain.verify(header)
        self.cursor = _LogCursor(log.body, chain)
        self.executor = _ReplayExecutor(self.cursor, capacity_from_json(
            header.fields["initial_capacity"]), self._check_rejections, simulated,
            _state_digest(log.format))
        self.engine = Engine(manifest.online, self.policy, self.executor, gate=gate)
        self._header = header
        self._declared_ids = {spec.request_id for spec in manifest.online.requests}
        self._is_rederiving = simulated is not None
        self._num_rejected_checked = 0

    def _check_rejections(self, line: LogLine | None) -> None:
        derived = [[rid, reason] for rid, reason in self.engine.rejected.items()]
        new = derived[self._num_rejected_checked:]
        self._num_rejected_checked = len(derived)
        logged = [] if line is None else line.fields.get("rejected", [])
        if dumps(logged) != dumps(new):
            where = self.cursor.end_where if line is None else line.where
            raise ReplayDivergence(f"{where}: rejected differs: logged {dumps(logged)}, "
                                   f"re-derived {dumps(new)}")

    def _apply_due_lines(self) -> bool:
        """Apply the cancel lines logged at the engine's current cut; True
        when the summary line that ends the original run is reached."""
        while (line := self.cursor.peek()) is not None and line.kind != "iteration":
            version = self.engine.state.state_version
            if line.fields["state_version"] > version:
                return False
            if line.fields["state_version"] < version:
                raise ReplayDivergence(
                    f"{line.where}: the log has a {line.kind} line at state_version "
                    f"{line.fields['state_version']}, replay is at {version}")
            self.cursor.take()
            self._check_rejections(line)
            if line.kind == "summary":
                self._check_summary(line)
                return True
            if line.kind == "arrival":
                self._declare(line)
                continue
            self._cancel(line)
        return False

    def _declare(self, line: LogLine) -> None:
        """A logged arrival line: its requests join the run's pending arrivals."""
        specs = arrival_requests(self._header, line)
        for spec in specs:
            if spec.request_id in self._declared_ids:
                raise ReplayDivergence(f"{line.where}: request {spec.request_id!r} was "
                                       f"declared twice")
            self._declared_ids.add(spec.request_id)
        try:
            self.engine.submit(specs)
        except ValueError as exc:  # an arrival before one declared earlier
            raise ReplayDivergence(f"{line.where}: {exc}") from None
        self.cursor.verify(line)

    def _check_summary(self, line: LogLine) -> None:
        state = self.engine.state
        if line.fields["decision_id"] != state.decision_id:
            raise ReplayDivergence(f"{line.where}: summary at decision "
                                   f"{line.fields['decision_id']}, replay is at "
                                   f"{state.decision_id}")
        if line.fields["is_done"] != self.engine.is_done:
            raise ReplayDivergence(f"{line.where}: summary says is_done "
                                   f"{line.fields['is_done']}, the replayed run has is_done "
                                   f"{self.engine.is_done}")
        self.cursor.verify(line)

    def _cancel(self, line: LogLine) -> None:
        """A logged cancellation; only a live request's is ever logged."""
        request_id = line.fields["request_id"]
        view = self.engine.state.views.get(request_id)
        if view is None or view.is_terminal:
            raise ReplayDivergence(f"{line.where}: the log cancels {request_id!r}, which is "
                                   f"not live in the replayed state")
        logged = line.fields.get("capacity")
        if logged is not None and not self._is_rederiving:
            self.executor.released(capacity_from_json(logged))
        self.engine.cancel(request_id)
        if logged is not None:
            _compare_json(line, "capacity", logged, capacity_to_json(self.engine.state.capacity))
        self.cursor.verify(line)

    def run(self) -> None:
        engine = self.engine
        while not self._apply_due_lines() and not engine.is_done:
            try:
                engine.step()
            except ContractViolation as exc:
                line = self.cursor.last
                where = self.cursor.end_where if line is None else line.where
                raise ReplayDivergence(f"{where}: logged result rejected ({exc.code}, "
                                       f"{failure_label(exc.code)}): {exc}") from None
        line = self.cursor.peek()
        if line is not None:
            raise ReplayDivergence(f"{line.where}: the log continues but the replayed run "
                                   f"ended after {engine.num_iterations} iterations")
        self._check_rejections(None)


def replay(path: Path, workload: Path | None = None) -> ReplayReport:
    """Re-derive the log at ``path``; with ``workload`` (the simulated run's
    workload file, hidden truth included) re-derive its results as well."""
    with open_log(path) as log:  # read as the replay goes: a long log is never held
        run = _Replay(log, workload)
        run.run()
        return ReplayReport(run.engine.num_iterations, run.policy.policy_id,
                            run.policy.policy_version, _results_check(log, workload))


def _results_check(log: DecisionLogFile, workload: Path | None) -> str:
    if workload is not None:
        return ("results and durations re-derived on the simulated executor "
                "(hidden-truth digest " + ("matches" if log.header.fields.get(
                    "output_lengths_sha256") else "not logged") + ")")
    if not log.has_chain:
        return f"results NOT checked (a format-{log.format} log has no digest chain)"
    if log.header.fields["executor"] == "simulated":
        return ("results checked against the digest chain only; pass --workload FILE "
                "to re-derive them")
    return "real-model results checked against the digest chain"
