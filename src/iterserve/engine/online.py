"""The online engine front: requests arrive while the engine runs.

One thread owns the :class:`Engine` and runs its step loop unchanged
(plan -> validate -> execute -> validate -> advance); other threads only put
submissions and aborts into an inbox under a condition and read immutable
snapshots. An idle engine waits on the condition; it never spins.

Clock: the engine clock is milliseconds of ``clock()`` since the front was
made. A submission is stamped with it when ``add_request`` is called (TTFT
counts from there, 0x07). After an idle jump the executor times the next
iteration from the jumped-to instant, so ``state.now`` keeps tracking the
engine clock. The loop drains the inbox only between steps and stamps no
arrival at or before the cut the previous step published at, so the arrival
lines in the decision log (engine/online_log.py) replay the run bit for bit.

Memory: the engine keeps a request's records only while it is live or
pending; its logs stream to the sinks :class:`OnlineLogs` names (or, by
default, are kept in memory for the offline API to read back).

Followers: a submission that ``waits_for`` an earlier one of its batch (the
server's ``n`` samples of one prompt) is held out of the scheduler until
that leader has its first output, then arrives and finds the leader's full
prompt blocks in the prefix cache (engine/held.py).

Abort (0x0C): ``Engine.cancel`` publishes a successor generation and frees
the request's blocks; it counts as cancelled (client) or aborted (engine).

Failures: an executor that attributes a failure to a request
(``FailureSource``) completes the step for the others; that request is
aborted after the step and its exception logged with its traceback. A step
that raises (the policy, validation, an executor that cannot attribute the
failure) leaves no state it could be resumed from: every live request is
aborted, and the exception is logged once with its traceback.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from iterserve.admission.overload import OverloadGate, engine_gate
from iterserve.engine.decision_log import GateRecord
from iterserve.engine.events import EventRecorder
from iterserve.engine.executor import Executor, FailureSource
from iterserve.engine.held import HeldRequest, HeldRequests
from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.engine.online_log import OnlineDecisionLog, OnlineLogs
from iterserve.engine.publisher import StreamPublisher
from iterserve.engine.streams import StreamSink
from iterserve.plan import Policy
from iterserve.plan.feasibility import check_run
from iterserve.policies.settings import settings_of
from iterserve.records.sampling_params import SamplingParams
from iterserve.records.spec import Capacity, KvSpec, OnlineWorkload, RequestSpec, SloTargets
from iterserve.records.state import SchedulerState
from iterserve.records.time_units import ms_to_s, s_to_ms

logger = logging.getLogger(__name__)

_IDLE_FLUSH_FACTS = 16  # decision-log facts encoded between two looks at the inbox


class EngineClosed(RuntimeError):
    """The engine is shutting down and accepts no new requests."""


class RequestRefused(ValueError):
    """A request that can never run here (too long for the model or the pool)."""


class TokenExecutor(Executor, Protocol):
    """An executor that holds real tokens (``TorchExecutor``)."""

    @property
    def streams(self) -> MutableMapping[str, Any]: ...  # request id -> OutputSource

    def add_request(self, request_id: str, prompt_token_ids: Sequence[int],
                    params: SamplingParams, seed: int) -> None: ...

    def reset_clock(self, start_s: float | None = None) -> None: ...


@dataclass(frozen=True, slots=True)
class Submission:
    """One request as a client declares it."""

    prompt_token_ids: Sequence[int]
    params: SamplingParams
    sink: StreamSink
    client_id: str = "anonymous"
    priority: int = 0
    slo: SloTargets | None = None
    # index of an earlier submission of the same batch whose prompt this one
    # waits for: it arrives once that one has its first output, and claims
    # its committed full prompt blocks from the prefix cache (engine/held.py)
    waits_for: int | None = None


class OnlineEngine:
    def __init__(self, executor: TokenExecutor, policy: Policy, capacity: Capacity, *,
                 max_model_len: int, kv: KvSpec | None = None, gate: OverloadGate | None = None,
                 observers: Sequence[EngineObserver] = (), executor_name: str = "torch",
                 clock: Callable[[], float] = time.perf_counter,
                 logs: OnlineLogs | None = None) -> None:
        self._clock = clock
        self._start_s = clock()
        self.executor = executor
        # checked once: a runtime protocol check is too slow for every step
        self._failure_source = executor if isinstance(executor, FailureSource) else None
        self.max_model_len = max_model_len
        self.publisher = StreamPublisher(executor.streams)
        logs = logs or OnlineLogs()
        self.events = _event_recorder(logs)
        workload = OnlineWorkload("online", "ms", capacity, (), kv=kv)
        recorders: list[EngineObserver] = [] if self.events is None else [self.events]
        # caller observers see a step before the streams do
        self.engine = Engine(workload, policy, executor,
                             [*recorders, *observers, self.publisher], gate=engine_gate(gate))
        self._initial_capacity = executor.capacity()
        self._gate_record = None if engine_gate(gate) is None or gate is None else \
            GateRecord(gate.gate_id, gate.params())
        self._file_sinks = [s for s in (logs.decision_log, logs.event_log) if s is not None]
        sink = logs.decision_log
        if sink is None and logs.keep_in_memory:
            sink = io.StringIO()
        self._log = None if sink is None else OnlineDecisionLog(
            sink, self.engine.bound_workload, self._initial_capacity, gate=self._gate_record,
            policy_settings=settings_of(policy), executor=executor_name)
        if self._log is not None:
            self.engine.observers.append(self._log)
        self._cond = threading.Condition()
        self._inbox: list[tuple[RequestSpec, StreamSink]] = []
        self._aborts: list[tuple[str, str]] = []
        self._deferred_aborts: dict[str, str] = {}
        self._held = HeldRequests()
        # when each released follower was submitted, until it ends: its TTFT counts from there
        self._submitted_ms: dict[str, float] = {}
        self.publisher.outcome_listeners.append(self._forget_submitted)
        self._published_through = 0.0  # the cut the last step published arrivals at
        self._last_stamp = 0.0
        self._num_submitted = 0
        self._is_accepting = True
        self._is_stopping = False
        self._thread = threading.Thread(target=self._run, name="iterserve-engine", daemon=True)
        self.error: BaseException | None = None

    # -- any thread -----------------------------------------------------------
    def now_ms(self) -> float:
        return s_to_ms(self._clock() - self._start_s)

    @property
    def state(self) -> SchedulerState:
        """The latest published state (immutable; safe to read from any thread)."""
        return self.engine.state

    @property
    def num_submitted(self) -> int:
        return self._num_submitted

    @property
    def is_accepting(self) -> bool:
        return self._is_accepting

    def start(self) -> OnlineEngine:
        self._thread.start()
        return self

    def check_request(self, num_prompt_tokens: int, max_tokens: int) -> None:
        """Refuse at submission what could never run (a clear error, not a stall)."""
        if num_prompt_tokens < 1:
            raise RequestRefused("the prompt is empty")
        budget = self.engine.bound_workload.capacity.max_num_batched_tokens
        if getattr(self.engine.policy, "whole_prompt_prefill", False) and \
                num_prompt_tokens > budget:  # such a prompt would wait forever (0x0E)
            raise RequestRefused(
                f"policy {self.engine.policy.policy_id!r} prefills whole prompts: the prompt "
                f"({num_prompt_tokens} tokens) exceeds the token budget {budget}")
        total = num_prompt_tokens + max_tokens
        if total > self.max_model_len:
            raise RequestRefused(
                f"prompt ({num_prompt_tokens} tokens) + max_tokens ({max_tokens}) = {total} "
                f"exceeds the maximum model length {self.max_model_len}")
        facts = self._initial_capacity
        if facts.num_blocks_total is not None and facts.blocks_for(total) > facts.num_blocks_total:
            raise RequestRefused(
                f"prompt + max_tokens needs {facts.blocks_for(total)} KV blocks; the pool has "
                f"{facts.num_blocks_total}")

    def check_batch(self, requests: Sequence[tuple[int, int]]) -> None:
        """Refuse a batch of (prompt tokens, max tokens) that the policy,
        having no preemption path, could not finish on this pool when it runs
        alone (as ``LLM.generate`` runs it): ``InfeasibleRun`` before any of
        it runs (``plan/feasibility.py``)."""
        specs = tuple(RequestSpec(f"batch-{i}", 0.0, p, m) for i, (p, m) in enumerate(requests))
        workload = dataclasses.replace(self.engine.bound_workload, requests=specs)
        check_run(self.engine.policy, workload, self._initial_capacity)

    def add_request(self, prompt_token_ids: Sequence[int], params: SamplingParams,
                    sink: StreamSink, *, client_id: str = "anonymous", priority: int = 0,
                    slo: SloTargets | None = None) -> str:
        """Submit one request; its events go to ``sink``. Returns its id."""
        ids, _ = self.add_requests([Submission(prompt_token_ids, params, sink, client_id,
                                               priority, slo)])
        return ids[0]

    def add_requests(self, submissions: Sequence[Submission]) -> tuple[list[str], float]:
        """Submit requests as one batch: one arrival instant, in this order
        (a submission that ``waits_for`` another arrives later: see
        engine/held.py). Returns their ids and the submission instant
        (engine-clock ms)."""
        for index, sub in enumerate(submissions):
            self.check_request(len(sub.prompt_token_ids), sub.params.max_tokens)
            _check_waits_for(submissions, index)
        with self._cond:
            if not self._is_accepting:
                raise EngineClosed("the engine is shutting down")
            self._last_stamp = max(self._last_stamp, self.now_ms())
            request_ids: list[str] = []
            for sub in submissions:
                leader = None if sub.waits_for is None else request_ids[sub.waits_for]
                request_ids.append(self._declare(sub, self._last_stamp, leader))
            self._cond.notify()
        return request_ids, self._last_stamp

    def submitted_ms(self, spec: RequestSpec) -> float:
        """When the client submitted a request (engine-clock ms): its
        arrival, or for a follower held for its leader's prompt the earlier
        instant it was submitted (engine thread, while it is live)."""
        return self._submitted_ms.get(spec.request_id, spec.arrival)

    def _declare(self, sub: Submission, arrival_ms: float, leader_id: str | None = None) -> str:
        self._num_submitted += 1
        request_id = f"req-{self._num_submitted}"
        ids = tuple(int(t) for t in sub.prompt_token_ids)
        spec = RequestSpec(request_id, arrival_ms, len(ids), sub.params.max_tokens,
                           client_id=sub.client_id, priority=sub.priority, prompt_token_ids=ids,
                           slo=sub.slo)
        seed = sub.params.seed if sub.params.seed is not None else self._num_submitted
        self.executor.add_request(request_id, ids, sub.params, seed)
        self.publisher.register(spec, sub.sink)
        if leader_id is None:
            self._inbox.append((spec, sub.sink))
        else:
            self._held.hold(HeldRequest(spec, sub.sink, leader_id))
        return request_id

    def take_error(self) -> BaseException | None:
        """The latest engine failure, if any (cleared): a step's, which ended
        every live request, or one request's own (``LLM.generate`` raises it:
        a batch call must not return an aborted output as if it were one)."""
        error, self.error = self.error, None
        return error

    def abort(self, request_id: str, reason: str = "cancelled") -> None:
        """Cancel a request (0x0C); ``reason`` other than cancelled counts as
        aborted. A held follower arrives now and is cancelled as any request
        aborted before it was published."""
        with self._cond:
            held = self._held.take(request_id)
            if held is not None:
                self._release([held])
            self._aborts.append((request_id, reason))
            self._cond.notify()

    def stop_accepting(self) -> None:
        with self._cond:
            self._is_accepting = False

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no request is live or pending; False on timeout."""
        deadline = self._clock() + timeout_s
        while self._clock() < deadline:
            with self._cond:
                if not self._inbox and not self._held and self.engine.is_done:
                    return True
            time.sleep(0.01)
        return False

    def shutdown(self, drain_timeout_s: float = 0.0) -> None:
        """Stop accepting, drain up to the timeout, abort the rest, stop the thread."""
        self.stop_accepting()
        if not self.wait_idle(drain_timeout_s):
            for request_id in self._live_ids():
                self.abort(request_id, "shutdown")
        with self._cond:
            self._is_stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()

    def decision_log(self) -> str:
        """The decision log so far, kept in memory: the header, then every
        line (arrivals included), and a summary line when the run is not done
        (call it while the engine is idle, or after :meth:`shutdown`, for a
        log that replays to its end)."""
        if self._log is None:
            raise ValueError("this engine keeps no decision log")
        with self._cond:
            return self._log.text(self.engine.state, is_done=self.engine.is_done)

    def write_logs(self, decision_log: Path | None, event_log: Path | None) -> None:
        """Write the logs kept in memory to files (the offline API, tests)."""
        if decision_log is not None:
            Path(decision_log).write_text(self.decision_log())
        if event_log is not None:
            if self.events is None:
                raise ValueError("this engine keeps no event log")
            self.events.log().write_jsonl(event_log)

    def close_logs(self) -> None:
        """After :meth:`shutdown`: encode what is queued and end the streamed
        logs (the decision log's summary line when the run is not done, the
        event log's pending facts). The sinks stay open: their owner closes them."""
        if self._log is not None:
            self._log.close(self.engine.state, is_done=self.engine.is_done)
        if self.events is not None:
            self.events.close()

    def _live_ids(self) -> list[str]:
        with self._cond:
            pending = [spec.request_id for spec, _ in self._inbox] + self._held.request_ids
        state = self.engine.state
        return pending + [rid for rid in (*state.waiting, *state.running, *state.suspended)]

    # -- the engine thread ----------------------------------------------------
    def _run(self) -> None:
        while True:
            # idle: encode the decision log off the step path, a slice at a
            # time so that an arrival waits for one slice at most
            while self.engine.is_done and not self._inbox and self._log is not None \
                    and self._log.flush(_IDLE_FLUSH_FACTS):
                pass
            if self.engine.is_done and not self._inbox:  # what is written is on disk when idle
                for sink in self._file_sinks:
                    sink.flush()
            with self._cond:
                self._release(self._held.take_due(self.engine.state, self.publisher.is_open))
                while not (self._inbox or self._aborts or self._is_stopping
                           or not self.engine.is_done):
                    self._cond.wait()
                if self._is_stopping and not (self._inbox or self._held) and self.engine.is_done:
                    return
                arrivals, self._inbox = self._inbox, []
                aborts, self._aborts = self._aborts, []
                self._submit(spec for spec, _ in arrivals)
            self._apply_aborts(aborts)
            if not self.engine.is_done:
                self._step()
            # the engine's own record of rejections is for replay; the front
            # has reported each one through its observers
            self.engine.rejected.clear()
            if self._log is not None and self._log.is_backlogged:  # a busy engine
                self._log.flush()

    def _release(self, followers: Sequence[HeldRequest]) -> None:
        """Held followers join the inbox: they arrive now (under the lock)."""
        if not followers:
            return
        self._last_stamp = max(self._last_stamp, self.now_ms())
        for held in followers:
            spec = held.spec
            self._submitted_ms[spec.request_id] = spec.arrival
            self._inbox.append((_restamp(spec, self._last_stamp), held.sink))
        self._cond.notify()

    def _forget_submitted(self, request_id: str, *_: str) -> None:
        self._submitted_ms.pop(request_id, None)

    def _submit(self, specs: Iterable[RequestSpec]) -> None:
        floor = math.nextafter(self._published_through, math.inf)
        stamped = []
        for spec in specs:
            arrival = max(spec.arrival, floor, self.engine.last_arrival)
            stamped.append(spec if arrival == spec.arrival else _restamp(spec, arrival))
        if self._log is not None:  # logged before the step that can publish them
            self._log.on_declare(stamped, self.engine.state)
        self.engine.submit(stamped)

    def _apply_aborts(self, aborts: Iterable[tuple[str, str]]) -> None:
        due = list(self._deferred_aborts.items()) + list(aborts)
        self._deferred_aborts = {}
        for request_id, reason in due:
            view = self.engine.state.views.get(request_id)
            if view is None:
                if self.publisher.is_open(request_id):  # declared, not yet published
                    self._deferred_aborts[request_id] = reason
            elif not view.is_terminal:
                self.publisher.end_reasons[request_id] = reason
                self.engine.cancel(request_id)

    def _step(self) -> None:
        engine = self.engine
        before_now, before_iterations = engine.state.now, engine.num_iterations
        try:
            engine.step()
        except Exception as exc:  # EngineStalled, a policy or a failed step: end the live
            self.error = exc
            state = engine.state
            logger.error("engine step at decision %d failed; aborting its %d live request(s)",
                         state.decision_id, state.num_live, exc_info=exc)
            self._abort_live(f"engine error: {type(exc).__name__}")
            return
        if self._failure_source is not None:
            self._abort_failed(self._failure_source.take_failures())
        if engine.num_iterations == before_iterations:  # an idle jump (or intents only)
            self._published_through = engine.state.now
            self.executor.reset_clock(self._start_s + ms_to_s(engine.state.now))
        else:
            self._published_through = before_now

    def _abort_failed(self, failures: dict[str, BaseException]) -> None:
        """Abort each request the executor failed on alone; the others go on."""
        for request_id, exc in failures.items():
            self.error = exc
            logger.error("request %s failed in the executor and is aborted; the other "
                         "requests go on", request_id, exc_info=exc)
            view = self.engine.state.views.get(request_id)
            if view is not None and not view.is_terminal:
                self.publisher.end_reasons[request_id] = f"engine error: {type(exc).__name__}"
                self.engine.cancel(request_id)

    def _abort_live(self, reason: str) -> None:
        state = self.engine.state
        for request_id in (*state.waiting, *state.running, *state.suspended):
            self.publisher.end_reasons[request_id] = reason
            self.engine.cancel(request_id)


def _check_waits_for(submissions: Sequence[Submission], index: int) -> None:
    """A follower waits for an earlier submission that waits for none."""
    leader = submissions[index].waits_for
    if leader is None:
        return
    if not 0 <= leader < index or submissions[leader].waits_for is not None:
        raise ValueError(f"submission {index} waits for {leader}: not an earlier leader "
                         "of the same batch")


def _event_recorder(logs: OnlineLogs) -> EventRecorder | None:
    """The metric event recorder the logs ask for: streaming (no batch
    composition: it would grow with every iteration), in memory, or none."""
    if logs.event_log is not None:
        return EventRecorder(ms_to_s(1.0), sink=logs.event_log, composes=False)
    return EventRecorder(ms_to_s(1.0)) if logs.keep_in_memory else None


def _restamp(spec: RequestSpec, arrival: float) -> RequestSpec:
    return dataclasses.replace(spec, arrival=arrival)
