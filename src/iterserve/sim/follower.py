"""A simulated run's follower: a second process that records the run.

Recording a simulated run costs about as much as running it: the decision
log's canonical lines and state digests, the metric events. On a machine
with a spare CPU, :func:`~iterserve.sim.report.run_simulation` forks a
follower before the run starts. The run's engine decides, validates and
executes every plan once, and hands down a pipe (the feed) every value its
policy and its executor answered the engine, in call order: the plans, the
results, the capacity facts and the prefix-hit claims. The follower runs the
same :class:`~iterserve.engine.loop.Engine` with a policy and an executor
that answer from the feed (:class:`FollowingPolicy`,
:class:`FollowingExecutor`), so it passes through the run's states without
deciding or executing anything, and its observers (the decision-log writer,
the events recorder) write their files there. The engine itself runs once
where it matters: the follower does only the state transitions. The run's
engine checks every plan before it runs and every result before it
advances the state; each decision's state is checked in the follower
(``Engine(check_states=...)``), which holds the same states: a state it
refuses ends it, and the run fails with that check's message.

The follower's states are the run's only if the engine is a function of
those answers, so the follower ends by reporting its :class:`RunEnd`
(iterations and the full :func:`~iterserve.records.state_digest.state_digest` of
its final state) and :meth:`FollowerProcess.finish` compares it with the
run's: a difference, or a follower that failed, raises
:class:`FollowerError` naming it. The files' bytes are the ones the
in-process observers write (the tests pin them equal).

The feed carries a plan's work and a result's completed intervals as field
columns (a completion's ids and intervals only where they are not the
plan's own), pickled in batches of steps. A plan's ``positions`` are not
sent: the run validates every plan first, and the validator accepts no
positions but ``range(start, end)``. The plans and results the follower
rebuilds keep those columns (:class:`~iterserve.records.plan.Work`,
:class:`~iterserve.records.result.Completed`), so its log and its
transitions read them without transposing the items again. A follower whose
parent dies sees its feed end and exits.

Only a stream backed by a file descriptor can be shared with a child
(:func:`can_share`); anything else is written in process.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import repeat
from typing import IO, Any, NoReturn

from iterserve.plan import Policy
from iterserve.records.columns import field_columns
from iterserve.records.plan import IterationPlan, Work, WorkItem
from iterserve.records.prefix_claims import PrefixClaims
from iterserve.records.result import Completed, CompletedInterval, IterationResult
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.sim.executor import SimulatedExecutor
from iterserve.sim.forked import ForkedCall, ForkedError, describe

_BATCH = 96  # feed records per pickled frame (about 32 steps: a step is 2 or 3 records)
_FRAME = struct.Struct("<Q")  # a frame: its pickle's length, then the pickle
_PIPE_BYTES = 1 << 20  # the feed pipe's buffer, where the OS lets it grow
_new_tuple = tuple.__new__  # NamedTuple.__new__ is slow on the hot path
# record tags: a plan, a result, and the executor's other answers
_PLAN, _RESULT, _CAPACITY, _CLAIM, _HITS = "plan", "result", "capacity", "claim", "hits"


class FollowerError(RuntimeError):
    """The follower failed, or its run ended elsewhere than the run it followed."""


class FollowerGone(FollowerError):
    """The feed's reader is gone (the follower ended early): the run stops
    and :meth:`FollowerProcess.fail` says why the follower ended."""


@dataclass(frozen=True, slots=True)
class RunEnd:
    """Where a run ended: what the two processes compare."""

    iterations: int
    state_digest: str


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def can_fork() -> bool:
    """A follower is worth starting: ``fork`` exists and two CPUs are usable."""
    return hasattr(os, "fork") and usable_cpus() >= 2


def can_share(stream: IO[str] | None) -> bool:
    """``stream`` writes to a file descriptor a forked child inherits."""
    if stream is None:
        return False
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.StringIO: io.UnsupportedOperation
        return False
    return True


# --- the feed: records in call order, pickled in frames -----------------------------------
def plan_record(plan: IterationPlan) -> tuple[Any, ...]:
    """A validated plan as a feed record: its work as field columns, the
    keys as one column per key field, the positions left out. A validated
    plan's positions are ``range(start, end)`` and its keys are all of one
    arity (the validator derives every key with one key function and
    accepts no other)."""
    columns: tuple[tuple[Any, ...], ...] = ()
    if plan.work:
        rids, generations, versions, starts, ends, kinds, _, keys = field_columns(plan.work)
        columns = (rids, generations, versions, starts, ends, kinds, tuple(zip(*keys, strict=True)))
    return (_PLAN, plan.decision_id, plan.input_state_version, plan.policy_id,
            plan.policy_version, columns, plan.tokens_used, plan.sequences_used,
            plan.tie_break_key, plan.intents, plan.release_waits)


def plan_from_record(record: tuple[Any, ...]) -> IterationPlan:
    """:func:`plan_record`'s plan, the same value."""
    (_, decision_id, state_version, policy_id, policy_version, columns, tokens_used,
     sequences_used, tie_break_key, intents, release_waits) = record
    work: tuple[WorkItem, ...] = ()
    if columns:
        rids, generations, versions, starts, ends, kinds, key_columns = columns
        keys = tuple(zip(*key_columns, strict=True)) if key_columns else ((),) * len(rids)
        fields = (rids, generations, versions, starts, ends, kinds,
                  tuple(map(range, starts, ends)), keys)
        work = Work.with_columns(map(_new_tuple, repeat(WorkItem), zip(*fields, strict=True)),
                                 fields)
    return IterationPlan(decision_id, state_version, policy_id, policy_version, work,
                         tokens_used, sequences_used, tie_break_key, intents,
                         release_waits=release_waits)


def result_record(result: IterationResult,
                  plan: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
    """A result as a feed record: its completed intervals as field columns.
    Where they are the work items of ``plan`` (its record), one for one in
    order (every interval ran), their ids, generations and intervals are
    not sent again."""
    columns: tuple[tuple[Any, ...], ...] = ()
    as_planned = False
    if result.completed:
        rids, generations, starts, ends, emitted, tokens, reasons = field_columns(
            result.completed)
        work: tuple[tuple[Any, ...], ...] = (
            plan[5] if plan is not None and plan[1] == result.decision_id else ())
        as_planned = bool(work) and (rids == work[0] and ends == work[4] and starts == work[3]
                                     and generations == work[1])
        columns = ((emitted, tokens, reasons) if as_planned
                   else (rids, generations, starts, ends, emitted, tokens, reasons))
    capacity = result.capacity
    facts = None if capacity is None else (capacity.block_size, capacity.num_blocks_total,
                                           capacity.num_blocks_free, capacity.releases_at_once,
                                           capacity.num_blocks_pending_release)
    return (_RESULT, result.decision_id, result.input_state_version, as_planned, columns,
            result.failures, result.service, result.duration, facts, result.receipts,
            result.releases)


def result_from_record(record: tuple[Any, ...],
                       plan: tuple[Any, ...] | None = None) -> IterationResult:
    """:func:`result_record`'s result, the same value (``plan``: the plan
    record it was made with)."""
    (_, decision_id, state_version, as_planned, columns, failures, service, duration, facts,
     receipts, releases) = record
    completed: tuple[CompletedInterval, ...] = ()
    if as_planned:
        if plan is None or plan[1] != decision_id:
            raise FollowerError(f"the run's result for decision {decision_id} refers to a plan "
                                f"the follower does not hold")
        rids, generations, _, starts, ends = plan[5][:5]
        columns = (rids, generations, starts, ends, *columns)
    if columns:
        completed = Completed.with_columns(
            map(_new_tuple, repeat(CompletedInterval), zip(*columns, strict=True)), columns)
    capacity = None if facts is None else CapacityFacts(*facts)
    return IterationResult(decision_id, state_version, completed, failures, service, duration,
                           capacity, receipts, releases)


class FeedWriter:
    """The run's end of the feed: records buffered, then written a frame at
    a time (a full pipe blocks the run until the follower catches up)."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        self._records: list[tuple[Any, ...]] = []
        self.last_plan: tuple[Any, ...] | None = None  # the record of the last plan put

    def put(self, record: tuple[Any, ...]) -> None:
        if record[0] == _PLAN:
            self.last_plan = record
        self._records.append(record)
        if len(self._records) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        if not self._records or self._fd is None:
            return
        blob = pickle.dumps(self._records, pickle.HIGHEST_PROTOCOL)
        self._records = []
        view = memoryview(_FRAME.pack(len(blob)) + blob)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except BrokenPipeError:
            raise FollowerGone("the follower stopped reading the run's feed") from None

    def close(self) -> None:
        """Write what is buffered, then end the feed (the follower reads its end)."""
        if self._fd is None:
            return
        try:
            self.flush()
        finally:
            os.close(self._fd)
            self._fd = None

    def discard(self) -> None:
        """End the feed without writing what is buffered (the run failed)."""
        self._records = []
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class FeedReader:
    """The follower's end of the feed: the records in the order they were put."""

    def __init__(self, fd: int) -> None:
        self._file = os.fdopen(fd, "rb", buffering=_PIPE_BYTES)
        self._records: deque[tuple[Any, ...]] = deque()
        self.last_plan: tuple[Any, ...] | None = None  # the record of the last plan taken

    def take(self, tag: str) -> tuple[Any, ...]:
        """The next record, which must answer ``tag``'s call."""
        if not self._records and not self._read_frame():
            raise FollowerError(f"the run's feed ended where the follower asked for a {tag}")
        record = self._records.popleft()
        if record[0] != tag:
            raise FollowerError(f"the follower asked for a {tag} where the run answered "
                                f"a {record[0]}")
        if tag == _PLAN:
            self.last_plan = record
        return record

    def expect_end(self) -> None:
        """The feed must end here: the follower's run asked for every record."""
        if self._records or self._read_frame():
            raise FollowerError(f"the run's feed holds a {self._records[0][0]} the follower's "
                                f"run never asked for")

    def _read_frame(self) -> bool:
        """Read one frame's records; False at the feed's end."""
        header = self._file.read(_FRAME.size)
        if not header:
            return False
        blob = self._file.read(_FRAME.unpack(header)[0]) if len(header) == _FRAME.size else b""
        if len(header) < _FRAME.size or len(blob) < _FRAME.unpack(header)[0]:
            raise FollowerError("the run's feed ended inside a frame")
        self._records.extend(pickle.loads(blob))
        return True


# --- what the engines see ------------------------------------------------------------------
class TappedPolicy:
    """The run's policy; every plan it chooses is put on the feed too."""

    __slots__ = ("_policy", "_feed")

    def __init__(self, policy: Policy, feed: FeedWriter) -> None:
        self._policy = policy
        self._feed = feed

    def choose(self, state: SchedulerState) -> IterationPlan:
        plan = self._policy.choose(state)
        self._feed.put(plan_record(plan))
        return plan

    def __getattr__(self, name: str) -> Any:  # identity, key, declared traits
        return getattr(self._policy, name)


class FollowingPolicy:
    """The follower's policy: each plan is the next one the run chose."""

    __slots__ = ("_policy", "_feed")

    def __init__(self, policy: Policy, feed: FeedReader) -> None:
        self._policy = policy  # the identity and declared traits the engine reads
        self._feed = feed

    def choose(self, state: SchedulerState) -> IterationPlan:
        plan = plan_from_record(self._feed.take(_PLAN))
        if plan.decision_id != state.decision_id:
            raise FollowerError(f"the follower is at decision {state.decision_id}, the run's "
                                f"next plan is for decision {plan.decision_id}")
        return plan

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)


class TappedExecutor:
    """The run's simulated executor; every answer the engine reads from it
    is put on the feed too."""

    __slots__ = ("_executor", "_feed")

    def __init__(self, executor: SimulatedExecutor, feed: FeedWriter) -> None:
        self._executor = executor
        self._feed = feed

    def capacity(self) -> CapacityFacts:
        facts = self._executor.capacity()
        self._feed.put((_CAPACITY, facts))
        return facts

    def execute(self, plan: IterationPlan, state: SchedulerState) -> IterationResult:
        result = self._executor.execute(plan, state)
        self._feed.put(result_record(result, self._feed.last_plan))
        return result

    def release(self, request_ids: Iterable[str]) -> None:
        self._executor.release(request_ids)

    def claim_prefix_hits(self, state: SchedulerState) -> PrefixClaims:
        hits = self._executor.claim_prefix_hits(state)
        self._feed.put((_CLAIM, hits))
        return hits

    def prefix_hits(self, state: SchedulerState) -> dict[str, int]:
        hits = self._executor.prefix_hits(state)
        self._feed.put((_HITS, hits))
        return hits


class FollowingExecutor:
    """The follower's executor: each answer is the run's executor's, in
    order; it executes and holds nothing."""

    __slots__ = ("_feed",)

    def __init__(self, feed: FeedReader) -> None:
        self._feed = feed

    def capacity(self) -> CapacityFacts:
        facts: CapacityFacts = self._feed.take(_CAPACITY)[1]
        return facts

    def execute(self, plan: IterationPlan, state: SchedulerState) -> IterationResult:
        result = result_from_record(self._feed.take(_RESULT), self._feed.last_plan)
        if result.decision_id != plan.decision_id:
            raise FollowerError(f"the follower executes decision {plan.decision_id}, the run's "
                                f"next result is for decision {result.decision_id}")
        return result

    def release(self, request_ids: Iterable[str]) -> None:
        pass  # the run's executor released them

    def claim_prefix_hits(self, state: SchedulerState) -> PrefixClaims:
        hits: PrefixClaims = self._feed.take(_CLAIM)[1]
        return hits

    def prefix_hits(self, state: SchedulerState) -> dict[str, int]:
        hits: dict[str, int] = self._feed.take(_HITS)[1]
        return hits


# --- the process -----------------------------------------------------------------------------
class FollowerProcess:
    """A forked child running ``follow`` on the feed's reading end
    (:class:`~iterserve.sim.forked.ForkedCall`); ``follow`` runs its engine
    to the end, writes and flushes its streams and returns its
    :class:`RunEnd` and what the run reads back from it (pickled). Flush
    the streams the child writes before starting one: it inherits their
    buffers."""

    def __init__(self, follow: Callable[[FeedReader], tuple[RunEnd, Any]]) -> None:
        feed_read, feed_write = os.pipe()
        with contextlib.suppress(AttributeError, OSError):  # Linux: a wider pipe, fewer stalls
            fcntl.fcntl(feed_write, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        self._child = ForkedCall(lambda: follow(FeedReader(feed_read)), close_in_child=(feed_write,))
        os.close(feed_read)
        self.feed = FeedWriter(feed_write)

    def finish(self, parent: RunEnd) -> Any:
        """End the feed and wait for the child; what it sent back. Raises
        :class:`FollowerError` unless it wrote its streams and ended where the
        run ended."""
        try:
            self.feed.close()
        except FollowerGone:
            self.fail()
        report, status = self._collect()
        if "error" in report:
            raise FollowerError(f"the follower process failed: {report['error']}")
        end, payload = report.get("value", (None, None))
        if not isinstance(end, RunEnd):
            raise FollowerError(f"the follower process ended without a report "
                                f"({describe(status)})")
        if end != parent:
            raise FollowerError(
                f"the follower process ended elsewhere: after {end.iterations} iterations at "
                f"state digest {end.state_digest[:12]}, the run after {parent.iterations} at "
                f"{parent.state_digest[:12]}")
        return payload

    def fail(self) -> NoReturn:
        """The feed broke (the child ended early): raise its reason."""
        self.feed.discard()
        report, status = self._collect()
        reason = report.get("error") or f"it ended early ({describe(status)})"
        raise FollowerError(f"the follower process failed: {reason}")

    def abandon(self) -> None:
        """Stop the child (the run failed); its streams are incomplete."""
        self.feed.discard()
        self._child.kill()

    def _collect(self) -> tuple[dict[str, Any], int]:
        try:
            return self._child.collect()
        except ForkedError as error:  # collected already
            raise FollowerError(f"the follower process: {error}") from None
