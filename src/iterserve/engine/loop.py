"""The engine step loop (0x00B): state -> plan -> validate -> execute ->
validate -> advance. Observers see every step; they never change it.

The loop owns arrival publication (requests become visible at their arrival
time on the run's clock) and idle gaps; it contains no policy logic.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iterserve.admission.gate import ArrivalGate
from iterserve.admission.readiness import ReadinessBoard, ReadinessFact, ReadinessRequirement
from iterserve.engine.executor import Executor, PrefixHitSource
from iterserve.engine.observer import EngineObserver
from iterserve.plan import Policy
from iterserve.plan.feasibility import check_run
from iterserve.records.ledger import ClientLedger
from iterserve.records.plan import IterationPlan
from iterserve.records.spec import OnlineWorkload, PolicyIdentity, RequestSpec
from iterserve.records.state import CapacityFacts, RunRules, SchedulerState
from iterserve.records.state_check import StateChecker
from iterserve.records.transition import (
    advance,
    cancel,
    claimed_prefix_rows,
    with_arrivals,
    with_claimed_prefix_rows,
    with_prefix_hits,
    with_readiness,
    without_claimed_prefix_rows,
)
from iterserve.records.validate import validate_plan, validate_result
from iterserve.records.view import Lifecycle
from iterserve.records.view_delta import UNTRACKED


class EngineStalled(RuntimeError):
    """Live requests exist, the policy chose nothing, and nothing can change."""


@dataclass(frozen=True, slots=True)
class EngineRun:
    """How an engine run ended: its iterations and its final state (the
    metrics' report of a run is :class:`~iterserve.metrics.run_summary.RunSummary`)."""

    iterations: int
    final_state: SchedulerState


def initial_state(workload: OnlineWorkload, capacity: CapacityFacts | None = None,
                  ledger: ClientLedger | None = None) -> SchedulerState:
    cap = workload.capacity
    return SchedulerState(
        decision_id=0, state_version=0, now=0.0, waiting=(), running=(), suspended=(),
        finished=(), views={}, max_num_batched_tokens=cap.max_num_batched_tokens,
        max_num_seqs=cap.max_num_seqs,
        capacity=capacity or CapacityFacts(), rules=RunRules.of(workload), ledger=ledger,
    )


def policy_ledger(policy: Policy) -> ClientLedger | None:
    """A fresh client ledger when the policy declares service weights (0x09A)."""
    weights = getattr(policy, "ledger_weights", None)
    return None if weights is None else ClientLedger(weights)


def bind_policy(workload: OnlineWorkload, policy: Policy) -> OnlineWorkload:
    """The run's workload, bound to the policy identity every plan must carry."""
    return dataclasses.replace(
        workload, policy=PolicyIdentity(policy.policy_id, policy.policy_version)
    )


def _has_pending_preservation(state: SchedulerState) -> bool:
    """A preserved request still waits for its READY receipt (0x0C)."""
    views = state.views
    return any(views[rid].lifecycle is Lifecycle.PREEMPT_PENDING for rid in state.suspended)


class Engine:
    def __init__(
        self,
        workload: OnlineWorkload,
        policy: Policy,
        executor: Executor,
        observers: Sequence[EngineObserver] = (),
        *,
        gate: ArrivalGate | None = None,
        validate: bool = True,
        check_states: bool | None = None,
        view_deltas: bool = True,
    ) -> None:
        """``validate``: check every plan before it runs and every result
        before it advances the state. ``check_states`` (default: as
        ``validate``): check every decision's state too (``validate_state``);
        a followed simulation checks its states in the follower, which holds
        the same states (:mod:`iterserve.sim.follower`). ``view_deltas``
        False: the transitions record no view deltas
        (:data:`~iterserve.records.view_delta.UNTRACKED`), for a run where no
        state check and no observer digests the states (a decision-log
        writer would re-read every view)."""
        # the workload as made, bound to the policy: what every step checks
        # against (its budgets and identity); requests declared later
        # (:meth:`submit`) are held only until they are published
        self.bound_workload = bind_policy(workload, policy)
        self.policy = policy
        self.executor = executor
        self.observers = list(observers)
        self.validate = validate
        self._state_check = StateChecker() if (
            validate if check_states is None else check_states) else None
        self.gate = gate
        self.readiness = ReadinessBoard()
        # checked once: a runtime protocol check is too slow for every step
        self._hit_source = executor if isinstance(executor, PrefixHitSource) else None
        self._has_claimed = False  # a prefix-hit claim was published (0x0E)
        self._claimed_now: Mapping[str, int] = {}  # the claims this decision published
        order = sorted(range(len(workload.requests)), key=lambda i: (workload.requests[i].arrival, i))
        # arrival_order is the rank by (arrival, file index): FCFS keys follow time.
        # Requests not yet published, in rank order; a published one leaves
        self._pending: deque[tuple[RequestSpec, int]] = deque(
            (workload.requests[i], rank) for rank, i in enumerate(order))
        self._num_declared = len(order)
        self._last_arrival = self._pending[-1][0].arrival if self._pending else 0.0
        self.state = initial_state(self.bound_workload, executor.capacity(),
                                   policy_ledger(policy))
        if not view_deltas:
            self.state = dataclasses.replace(self.state, view_delta=UNTRACKED)
        check_run(policy, self.bound_workload, self.state.capacity)  # InfeasibleRun, before decision 0
        # prefix-hit facts are published only for a policy that reads them
        self._prefix_hits = (getattr(executor, "prefix_hits", None)
                             if getattr(policy, "uses_prefix_hits", False) else None)
        self.rejected: dict[str, str] = {}
        self.num_iterations = 0

    @property
    def is_done(self) -> bool:
        return not self.state.has_live and not self._pending

    @property
    def num_pending_arrivals(self) -> int:
        """Requests declared and not yet published."""
        return len(self._pending)

    @property
    def last_arrival(self) -> float:
        """The latest arrival declared so far (0 before any)."""
        return self._last_arrival

    def submit(self, specs: Sequence[RequestSpec]) -> None:
        """Declare requests while the engine runs (the online front).

        They join the pending arrivals in arrival order, none before the last
        one declared, and are published by the same rule as a workload's: at
        the first cut at or after their arrival. A decision log that records
        each declaration before the step that follows it (or a header that
        holds them all) therefore replays the run. A declaration costs its
        own requests; the engine keeps a request's spec only until it is
        published.
        """
        last = self._last_arrival
        for spec in specs:
            if spec.arrival < last:
                raise ValueError(f"{spec.request_id}: arrival {spec.arrival} precedes {last}")
            last = spec.arrival
        for spec in specs:
            self._pending.append((spec, self._num_declared))
            self._num_declared += 1
        self._last_arrival = last

    def _publish_arrivals(self, now: float | None = None) -> None:
        """Publish arrivals due by the clock (or by ``now``, an idle jump).

        With an arrival gate each arrival is screened against the state that
        already holds the arrivals admitted before it.
        """
        clock = self.state.now if now is None else now
        pending = self._pending
        due: list[tuple[RequestSpec, int]] = []
        while pending and pending[0][0].arrival <= clock:
            due.append(pending.popleft())
        if now is not None:
            self.state = with_arrivals(self.state, (), now=now)
        batch: list[tuple[RequestSpec, int]] = []
        for spec, order in due:
            if self.gate is not None:
                self.state = with_arrivals(self.state, batch) if batch else self.state
                batch = []
                reason = self.gate.screen(spec, self.state)
                if reason is not None:
                    self._reject(spec, reason)
                    continue
            batch.append((spec, order))
            for observer in self.observers:
                observer.on_arrival(spec, spec.arrival)
        if batch:
            self.state = with_arrivals(self.state, batch)

    def _reject(self, spec: RequestSpec, reason: str) -> None:
        self.rejected[spec.request_id] = reason
        for observer in self.observers:
            observer.on_reject(spec, reason, spec.arrival)

    def cancel(self, request_id: str) -> None:
        """Cancel a live request between iterations (0x0C): a successor
        generation; the executor frees what it holds for it."""
        state = self.state
        successor = cancel(state, request_id)
        if successor is state:
            return
        self.executor.release([request_id])
        # the freed blocks are a capacity fact the next plan must see
        successor = dataclasses.replace(successor, capacity=self.executor.capacity())
        for observer in self.observers:
            observer.on_cancel(request_id, state, successor)
        self.state = successor

    def _jump_to_next_arrival(self) -> bool:
        if not self._pending:
            return False
        self._publish_arrivals(now=max(self.state.now, self._pending[0][0].arrival))
        return True

    def publish_fact(self, fact: ReadinessFact) -> None:
        """A foreign owner reports readiness (remote K/V, promotion, layers)."""
        self.readiness.publish(fact)

    def require(self, request_id: str, requirements: Sequence[ReadinessRequirement]) -> None:
        """Make ``request_id`` wait for READY facts of these kinds (0x0C)."""
        self.readiness.require(request_id, requirements)

    def _publish_readiness(self) -> None:
        """The readiness board's facts become the views' ``is_ready`` flags
        before the policy runs (0x0C); observers see the flags that flipped
        (an event log records them: F63 eligibility), only those."""
        changed = self.readiness.readiness(self.state)
        if not changed:
            return
        self.state = with_readiness(self.state, changed)
        for observer in self.observers:
            observer.on_readiness(changed, self.state)

    def _publish_claimed_prefix_rows(self) -> None:
        """The allocator's verified prefix hits become state facts before the
        policy runs, so plans start past them (0x0E)."""
        self._claimed_now = {}
        if self._hit_source is None or not self.state.waiting:
            return
        # only this method publishes claims: until it has, no waiting request
        # holds one, and the scan of the waiting queue is skipped
        held = claimed_prefix_rows(self.state) if self._has_claimed else {}
        if held:  # last decision's claims end: nobody waits on blocks a waiter holds
            self.executor.release(held)
            self.state = without_claimed_prefix_rows(self.state, held)
        claims = self._hit_source.claim_prefix_hits(self.state)
        if claims:
            self._has_claimed = True
            self.state = with_claimed_prefix_rows(self.state, claims.rows, claims.reclaimed_blocks)
            self._claimed_now = claims.rows

    def _release_unplanned_claims(self, plan: IterationPlan) -> None:
        """A claim the plan does not schedule ends before execution: the
        capacity facts counted its reclaimed blocks as free, and the plan
        charged them only to the claimers it scheduled (records/prefix_claims).
        The state keeps the claim until the next decision withdraws it."""
        claimed, self._claimed_now = self._claimed_now, {}
        scheduled = {item.request_id for item in plan.work}
        unplanned = [rid for rid in claimed if rid not in scheduled]
        if unplanned:
            self.executor.release(unplanned)

    def step(self) -> bool:
        """Run one iteration (or cross one idle gap). False once the run is done."""
        self._publish_arrivals()
        self._publish_readiness()
        self._publish_claimed_prefix_rows()
        if not self.state.has_live:
            return self._jump_to_next_arrival()
        if self._prefix_hits is not None:
            self.state = with_prefix_hits(self.state, self._prefix_hits(self.state))
        state = self.state
        plan = self.readiness.bind_dependencies(self.policy.choose(state), state)
        if self._state_check is not None:
            self._state_check.check(state)  # validate_state, unchanged views not re-read
        if self.validate:
            validate_plan(self.bound_workload, state, plan)
        # a request waiting on a release in flight (0x06) or a preservation
        # (0x0C) waits on the memory owner: the empty plan runs, nothing stalls
        if (plan.is_empty and not _has_pending_preservation(state)
                and not state.capacity.num_blocks_pending_release):
            if self._jump_to_next_arrival():
                return True
            raise EngineStalled(
                f"{self.policy.policy_id} chose nothing at decision {state.decision_id} with "
                f"{state.num_live} live request(s) and no future arrivals"
            )
        if self._claimed_now:
            self._release_unplanned_claims(plan)
        # the executor sees intent-only plans too: preemptions free memory, and
        # an empty plan while a preservation is in flight collects its receipt
        result = self.executor.execute(plan, state)
        if self.validate:
            validate_result(plan, state, result)
        successor = advance(state, plan, result)
        for observer in self.observers:
            observer.on_step(state, plan, result, successor)
        self.state = successor
        self.num_iterations += 1 if plan.work else 0
        return True

    def run(self, max_iterations: int | None = None) -> EngineRun:
        while not self.is_done:
            if max_iterations is not None and self.num_iterations >= max_iterations:
                break
            self.step()
        return EngineRun(self.num_iterations, self.state)
