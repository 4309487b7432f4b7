"""The pure state transition (0x00B, 0x01A).

``advance`` publishes only completed progress: computed/committed frontiers
move to each completed end, prefill reaching ``p`` or a decode row emits one
token, and only completed non-rebuild rows are debited as client service.
Queue intents from the plan are applied first. Nothing here reads a clock,
a policy or hidden truth.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain, compress, repeat
from operator import add, is_not

from iterserve.records.columns import field_columns
from iterserve.records.id_queue import Queue, appended, with_front, without
from iterserve.records.ledger import Charge, ClientLedger, charge, lift
from iterserve.records.live_clients import carried as live_carried
from iterserve.records.plan import IntentKind, IterationPlan, QueueIntent
from iterserve.records.preemption import FallbackMode
from iterserve.records.receipts import (
    ForeignStatus,
    PreservationResult,
    ReleaseResult,
    binding_of,
    is_stale,
)
from iterserve.records.release_waits import next_release_waits
from iterserve.records.result import CompletedInterval, IterationResult
from iterserve.records.rows_bound import carried
from iterserve.records.spec import RequestSpec
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.records.view import FinishReason, Lifecycle, RequestView, check_transition
from iterserve.records.view_delta import next_delta
from iterserve.records.view_map import edit, publish


def with_arrivals(
    state: SchedulerState, arrivals: Iterable[tuple[RequestSpec, int]], now: float | None = None
) -> SchedulerState:
    """Publish newly arrived requests (spec, arrival_order) at the back of
    waiting, optionally moving the clock forward to ``now`` (an idle gap)."""
    views = _copy(state.views)
    arrivals = list(arrivals)
    for spec, order in arrivals:
        if spec.request_id in views:
            raise ValueError(f"{spec.request_id} arrived twice")
        views[spec.request_id] = RequestView(
            request_id=spec.request_id,
            generation=0,
            snapshot_version=0,
            client_id=spec.client_id,
            priority=spec.priority,
            arrival=spec.arrival,
            arrival_order=order,
            num_prompt_tokens=spec.num_prompt_tokens,
            max_output_tokens=spec.max_output_tokens,
            slo=spec.slo,
            output_forecast=spec.output_forecast,
            output_forecast_p90=spec.output_forecast_p90,
        )
    if now is not None and now < state.now:
        raise ValueError(f"clock cannot move back from {state.now} to {now}")
    ledger = state.ledger
    if ledger is not None and arrivals:
        ledger = lift(ledger, state.active_clients(), (spec.client_id for spec, _ in arrivals),
                      state.now if now is None else now)
    arrived = [views[spec.request_id] for spec, _ in arrivals]
    waiting = appended(state.waiting, [spec.request_id for spec, _ in arrivals])
    return _successor(state, views, waiting, state.running, state.suspended, state.finished,
                      now=state.now if now is None else now, decision_id=state.decision_id,
                      ledger=ledger, changed=arrived,
                      entered=[spec.request_id for spec, _ in arrivals])


def advance(state: SchedulerState, plan: IterationPlan, result: IterationResult) -> SchedulerState:
    """The successor of ``state`` after a validated ``plan`` and ``result``.

    The caller validates both first; this function trusts them.
    """
    now = state.now + result.duration
    views = _copy(state.views)
    for rid in state.finished:  # terminal at the last cut: retired now
        del views[rid]
    queues = _Queues(state)
    failed = {failure.request_id for failure in result.failures} if result.failures else set()
    receipts = {r.binding.request_id: r for r in result.receipts} if result.receipts else {}
    releases = {r.binding.request_id: r for r in result.releases} if result.releases else {}
    fallback = state.rules.preservation_fallback
    for intent in plan.intents:
        rid = intent.request_id
        _apply_intent(views, queues, intent, rid in failed, receipts.pop(rid, None),
                      releases.pop(rid, None), fallback)
    for receipt in receipts.values():  # preservations started in an earlier iteration
        _settle_preservation(views, queues, receipt, fallback)
    for release in releases.values():  # releases asked for in an earlier iteration
        _settle_release(views, queues, release)
    completed, newly_finished, once = _complete_rows(views, result.completed, now)
    service = dict(state.service)
    for client, rows in result.service.items():
        service[client] = service.get(client, 0) + rows
    if newly_finished:
        done = set(newly_finished)
        queues.running = [rid for rid in queues.running if rid not in done]
    queues.finished.extend(newly_finished)
    successor = _successor(
        state, views, *queues.frozen(), tuple(queues.finished), now=now,
        decision_id=state.decision_id + 1, service=service,
        capacity=result.capacity, changed=completed, removed=state.finished,
        rise=1 if once else None,  # one emission at most per request (validated results)
        release_waits=next_release_waits(state.release_waits, plan.release_waits),
        left=queues.finished,
        touched=[*(intent.request_id for intent in plan.intents),
                 *(receipt.binding.request_id for receipt in result.receipts),
                 *(release.binding.request_id for release in result.releases)],
    )
    if state.ledger is None:
        return successor
    return _replace_ledger(successor, _charged(state.ledger, state, plan, result, successor))


def _charged(ledger: ClientLedger, state: SchedulerState, plan: IterationPlan,
             result: IterationResult, successor: SchedulerState) -> ClientLedger:
    """Joins (fresh prompts whose ADMIT was applied) and completed intervals."""
    views = state.views
    charges = [Charge(views[i.request_id], joined=True) for i in plan.intents
               if i.kind is IntentKind.ADMIT and views[i.request_id].num_computed == 0
               and views[i.request_id].num_emitted == 0]
    charges += [Charge(views[item.request_id], item.start, item.end) for item in result.completed]
    live = state.live_clients_now()
    return charge(ledger, charges, set(live.counts), successor.active_clients(),
                  successor.now, live.blocked())


def _replace_ledger(state: SchedulerState, ledger: ClientLedger) -> SchedulerState:
    return dataclasses.replace(state, ledger=ledger)


class _Queues:
    """The queues a decision's intents edit. The waiting queue stays the
    state's (a tuple or a shared :class:`~iterserve.records.id_queue.IdQueue`)
    and each edit makes a new version of it (most decisions leave a long
    waiting queue alone or take its head); the suspended queue is copied
    into a list only when an intent edits it."""

    __slots__ = ("_state", "waiting", "running", "_suspended", "finished")

    def __init__(self, state: SchedulerState) -> None:
        self._state = state
        self.waiting: Queue = state.waiting
        self._suspended: list[str] | None = None
        self.running = list(state.running)
        self.finished: list[str] = []

    @property
    def suspended(self) -> list[str]:
        if self._suspended is None:
            self._suspended = list(self._state.suspended)
        return self._suspended

    def leave(self, request_id: str) -> None:
        """``request_id`` leaves whichever live queue holds it."""
        for queue in (self.running, self.suspended):
            if request_id in queue:
                queue.remove(request_id)
                return
        self.waiting = without(self.waiting, request_id)

    def frozen(self) -> tuple[Queue, tuple[str, ...], tuple[str, ...]]:
        """The waiting, running and suspended queues as published."""
        state = self._state
        return (self.waiting, tuple(self.running),
                state.suspended if self._suspended is None else tuple(self._suspended))


def _apply_intent(
    views: dict[str, RequestView], queues: _Queues, intent: QueueIntent, failed: bool,
    receipt: PreservationResult | None = None, release: ReleaseResult | None = None,
    fallback: FallbackMode = FallbackMode.RECOMPUTE,
) -> None:
    """Apply one queue intent through the lifecycle table (0x0C).

    ``failed`` is the executor's fact that the intent's memory action failed:
    a failed preservation takes the run's declared ``fallback``
    (:func:`_fall_back`); a failed resume leaves the request suspended. A preservation ends SUSPENDED_PRESERVED only with a
    current READY ``receipt``; without one it stays PREEMPT_PENDING (in the
    suspended queue, never resumable) until a later result settles it.
    Likewise a recompute whose ``release`` is not READY stays
    PREEMPT_PENDING: its blocks are not free and it is not runnable until a
    matching READY release arrives (no release: a run without a memory
    owner, settled at once).
    """
    rid = intent.request_id
    view = views[rid]
    kind = intent.kind
    if kind is IntentKind.GUARD:
        return  # a record of why the interval was forced; no queue change
    if kind is IntentKind.ADMIT:
        queues.waiting = without(queues.waiting, rid)
        queues.running.append(rid)
        views[rid] = _relabel(view, Lifecycle.RUNNING)
    elif kind is IntentKind.RESUME:
        if failed:
            return
        queues.suspended.remove(rid)
        queues.running.append(rid)
        views[rid] = _relabel(view, Lifecycle.RESUME_PENDING, Lifecycle.RUNNING)
    elif kind is IntentKind.PREEMPT_PRESERVE_EXACT and not failed:
        queues.running.remove(rid)
        queues.suspended.append(rid)
        views[rid] = _relabel(view, Lifecycle.PREEMPT_PENDING, epoch_step=1)
        if receipt is not None:
            _settle_preservation(views, queues, receipt, fallback, same_iteration=True)
    elif kind is IntentKind.PREEMPT_PRESERVE_EXACT and fallback is not FallbackMode.RECOMPUTE:
        queues.running.remove(rid)
        queues.suspended.append(rid)
        pending = _relabel(view, Lifecycle.PREEMPT_PENDING, epoch_step=1)
        views[rid] = pending._replace(snapshot_version=view.snapshot_version)
        _fall_back(views, queues, rid, fallback)
    elif kind in (IntentKind.PREEMPT_RECOMPUTE, IntentKind.PREEMPT_PRESERVE_EXACT):
        queues.running.remove(rid)
        if release is not None and release.status is not ForeignStatus.READY:
            queues.suspended.append(rid)  # PREEMPT_PENDING is not free capacity (0x0C)
            views[rid] = _relabel(view, Lifecycle.PREEMPT_PENDING, epoch_step=1)
            return
        queues.waiting = with_front(queues.waiting, rid)  # preempted requests resume first (0x0D)
        views[rid] = _recompute_reset(view)
    else:  # REJECT or ABORT: terminal
        queues.leave(rid)
        terminal = Lifecycle.REJECTED if kind is IntentKind.REJECT else Lifecycle.ABORTED
        reason = FinishReason.REJECTED if kind is IntentKind.REJECT else FinishReason.ABORT
        views[rid] = _terminal(view, terminal, reason)
        queues.finished.append(rid)


def _settle_preservation(views: dict[str, RequestView], queues: _Queues,
                         receipt: PreservationResult,
                         fallback: FallbackMode = FallbackMode.RECOMPUTE, *,
                         same_iteration: bool = False) -> None:
    """Consume a preservation receipt for a PREEMPT_PENDING request (0x0C):
    READY -> SUSPENDED_PRESERVED; FAILED -> the declared ``fallback``
    (:func:`_fall_back`); INFLIGHT or stale -> unchanged. Settled in the
    intent's own iteration, the view gets one successor snapshot, not two
    (as before receipts existed)."""
    rid = receipt.binding.request_id
    view = views[rid]
    if view.lifecycle is not Lifecycle.PREEMPT_PENDING or is_stale(receipt.binding,
                                                                 binding_of(view)):
        return
    if receipt.status is ForeignStatus.INFLIGHT:
        return
    if same_iteration:
        view = view._replace(snapshot_version=view.snapshot_version - 1)
    if receipt.status is ForeignStatus.READY:
        views[rid] = _relabel(view, Lifecycle.SUSPENDED_PRESERVED)
    elif receipt.status is ForeignStatus.FAILED:
        views[rid] = view
        _fall_back(views, queues, rid, fallback)


def _fall_back(views: dict[str, RequestView], queues: _Queues, rid: str,
               fallback: FallbackMode) -> None:
    """0x0C's fallback matrix for a PREEMPT_PENDING request (in the suspended
    queue) whose preservation FAILED; its K/V is lost either way:

    - RECOMPUTE: SUSPENDED_RECOMPUTE -> WAITING at the front, computed rows
      dropped: the next admission rebuilds [0, T_target) from the token history;
    - REMAIN_SUSPENDED: SUSPENDED_RECOMPUTE, computed rows dropped, kept in
      the suspended queue: no resume ticket until a resume pass brings it
      back, which rebuilds [0, T_target);
    - ABORT: ABORTED, terminal.
    """
    view = views[rid]
    if fallback is FallbackMode.ABORT:
        queues.suspended.remove(rid)
        views[rid] = _terminal(view, Lifecycle.ABORTED, FinishReason.ABORT)
        queues.finished.append(rid)
        return
    if fallback is FallbackMode.RECOMPUTE:
        queues.suspended.remove(rid)
        queues.waiting = with_front(queues.waiting, rid)
        lost = _relabel(view, Lifecycle.SUSPENDED_RECOMPUTE, Lifecycle.WAITING)
    else:
        lost = _relabel(view, Lifecycle.SUSPENDED_RECOMPUTE)
    views[rid] = lost._replace(num_computed=0, num_committed=0)


def _settle_release(views: dict[str, RequestView], queues: _Queues,
                    release: ReleaseResult) -> None:
    """Consume a release receipt for a PREEMPT_PENDING recompute (0x0C): a
    current READY one ends the suspension (front of waiting, computed rows
    dropped); INFLIGHT, FAILED or stale leave it pending."""
    rid = release.binding.request_id
    view = views.get(rid)
    if view is None or view.lifecycle is not Lifecycle.PREEMPT_PENDING or (
            release.status is not ForeignStatus.READY or is_stale(release.binding,
                                                                  binding_of(view))):
        return
    queues.suspended.remove(rid)
    queues.waiting = with_front(queues.waiting, rid)
    settled = _relabel(view, Lifecycle.SUSPENDED_RECOMPUTE, Lifecycle.WAITING)
    views[rid] = settled._replace(num_computed=0, num_committed=0)


def _relabel(view: RequestView, *path: Lifecycle, epoch_step: int = 0) -> RequestView:
    """Walk ``path`` through the transition table; the view ends at its last state."""
    current = view.lifecycle
    for lifecycle in path:
        check_transition(current, lifecycle)
        current = lifecycle
    return _replace(view, lifecycle=current, suspension_epoch=view.suspension_epoch + epoch_step)


def _recompute_reset(view: RequestView) -> RequestView:
    """RECOMPUTE drops computed rows; emitted output stays, so a rebuild
    from 0 to the target that emits nothing comes next (0x0C)."""
    relabelled = _relabel(view, Lifecycle.PREEMPT_PENDING, Lifecycle.SUSPENDED_RECOMPUTE,
                          Lifecycle.WAITING, epoch_step=1)
    return relabelled._replace(num_computed=0, num_committed=0)


def _terminal(view: RequestView, lifecycle: Lifecycle, reason: FinishReason) -> RequestView:
    check_transition(view.lifecycle, lifecycle)
    return _replace(view, lifecycle=lifecycle, finish_reason=reason)


def _complete(view: RequestView, item: CompletedInterval, now: float) -> RequestView:
    (rid, generation, snapshot, client, priority, arrival, order, p, max_out, emitted, _, _,
     lifecycle, is_ready, epoch, first, last, reason, slo, forecast, forecast_p90) = view
    end = item.end
    if item.emitted:
        emitted += 1
        last = now
        if first is None:
            first = now
        reason = item.finish_reason
        if reason is not None:
            lifecycle = _FINISHED
    return _new_tuple(RequestView, (  # skips the NamedTuple __new__'s argument parsing (hot path)
        rid, generation, snapshot + 1, client, priority, arrival, order, p, max_out, emitted,
        end, end, lifecycle, is_ready, epoch, first, last, reason, slo, forecast, forecast_p90,
    ))


def _complete_rows(views: dict[str, RequestView], items: Sequence[CompletedInterval],
                   now: float) -> tuple[list[RequestView], list[str], bool]:
    """:func:`_complete` of each completed interval's view, replaced in
    ``views``: the new views and the ids that finished, in result order, and
    whether each request completed once at most (validation refuses more).
    Built a field column at a time (the views transposed, the changed
    columns replaced, transposed back), with no Python-level call per row."""
    if not items:
        return [], [], True
    rids, _, _, ends, emitted, _, reasons = field_columns(items)
    if len(set(rids)) != len(rids):  # a request twice (validation refuses it): in order
        completed = []
        for rid, item in zip(rids, items, strict=True):
            completed.append(_complete(views[rid], item, now))
            views[rid] = completed[-1]
        return completed, [v.request_id for v in completed if v.lifecycle is _FINISHED], False
    columns: list[Iterable[object]] = list(zip(*map(views.__getitem__, rids), strict=True))
    columns[_AT_SNAPSHOT] = map(add, columns[_AT_SNAPSHOT], repeat(1))
    columns[_AT_COMPUTED] = columns[_AT_COMMITTED] = ends
    columns[_AT_NUM_EMITTED] = map(add, columns[_AT_NUM_EMITTED], emitted)  # True counts one
    firsts = list(columns[_AT_FIRST])
    if all(emitted):  # the common step: every row emitted
        finished = [i for i in compress(range(len(rids)), map(is_not, reasons, repeat(None)))]
        columns[_AT_LAST], columns[_AT_REASON] = repeat(now), reasons
        if not all(firsts):  # some first output (or a first output at time 0.0)
            firsts = [now if first is None else first for first in firsts]
    else:
        lasts, old_reasons = list(columns[_AT_LAST]), list(columns[_AT_REASON])
        finished = []
        for i in compress(range(len(rids)), emitted):
            lasts[i], old_reasons[i] = now, reasons[i]
            if firsts[i] is None:
                firsts[i] = now
            if reasons[i] is not None:
                finished.append(i)
        columns[_AT_LAST], columns[_AT_REASON] = lasts, old_reasons
    columns[_AT_FIRST] = firsts
    if finished:
        lifecycles = list(columns[_AT_LIFECYCLE])
        for i in finished:
            lifecycles[i] = _FINISHED
        columns[_AT_LIFECYCLE] = lifecycles
    completed = list(map(_new_tuple, repeat(RequestView), zip(*columns, strict=False)))
    views.update(zip(rids, completed, strict=True))
    return completed, [rids[i] for i in finished], True


_FINISHED = Lifecycle.FINISHED
_new_tuple = tuple.__new__
(_AT_SNAPSHOT, _AT_NUM_EMITTED, _AT_COMPUTED, _AT_COMMITTED, _AT_LIFECYCLE, _AT_FIRST, _AT_LAST,
 _AT_REASON) = map(RequestView._fields.index, (
    "snapshot_version", "num_emitted", "num_computed", "num_committed", "lifecycle",
    "first_token_time", "last_output_time", "finish_reason"))


def _copy(views: Mapping[str, RequestView]) -> dict[str, RequestView]:
    """A writable successor of ``views``: a copy of a small mapping, a
    draft over a large one that shares its unchanged views
    (:mod:`iterserve.records.view_map`); :func:`_successor` publishes it."""
    return edit(views)


def _replace(view: RequestView, **changes: object) -> RequestView:
    """A copy with ``changes`` and the next snapshot version."""
    return view._replace(snapshot_version=view.snapshot_version + 1, **changes)  # type: ignore[arg-type]


def _successor(
    state: SchedulerState,
    views: dict[str, RequestView],
    waiting: Queue,
    running: tuple[str, ...],
    suspended: tuple[str, ...],
    finished: tuple[str, ...],
    *,
    now: float,
    decision_id: int,
    service: dict[str, int] | None = None,
    capacity: CapacityFacts | None = None,
    ledger: ClientLedger | None = None,
    changed: Sequence[RequestView] = (),
    touched: Iterable[str] = (),
    removed: Iterable[str] = (),
    rise: int | None = None,
    entered: Sequence[str] = (),
    left: Sequence[str] = (),
    flipped: Sequence[str] = (),
    release_waits: Mapping[str, int] | None = None,
) -> SchedulerState:
    """The next state. ``changed``: every view whose ``p + e`` may differ
    from ``state``'s (arrivals, completions); ``touched``: the ids of every
    other view written; ``removed``: the ids deleted (the view delta).
    ``rise``: how far ``p + e`` of a changed view can have risen at most,
    each replacing one of ``state``'s views (completions: one emission).
    ``entered``: the ids that became live (arrivals); ``left``: those that
    became terminal; ``flipped``: those whose ready flag changed (the live
    clients of a run that keeps a ledger). ``release_waits``: the successor's
    counts of consecutive waits on a release in flight (records/release_waits;
    None: ``state``'s, carried by the events between two decisions)."""
    facts = state.capacity if capacity is None else capacity
    views = publish(views)
    delta = next_delta(state.view_delta, state.views, views,
                       chain(map(_REQUEST_ID, changed), touched), removed)
    queues = (waiting, running, suspended)
    live = None if state.ledger is None and ledger is None else live_carried(
        state.live_clients_now(), views, queues, entered=entered, left=left, flipped=flipped)
    return SchedulerState(
        decision_id=decision_id,
        state_version=state.state_version + 1,
        now=now,
        waiting=waiting,
        running=running,
        suspended=suspended,
        finished=finished,
        views=views,
        max_num_batched_tokens=state.max_num_batched_tokens,
        max_num_seqs=state.max_num_seqs,
        capacity=facts,
        service=state.service if service is None else service,
        rules=state.rules,
        release_waits=state.release_waits if release_waits is None else release_waits,
        ledger=state.ledger if ledger is None else ledger,
        rows_bound=carried(state.views, state.rows_bound, views, changed, _pool_rows(facts),
                           rise=rise),
        view_delta=delta,
        live_clients=live,
    )  # prefix_hits: facts of one cut, never carried to a successor


def _pool_rows(facts: CapacityFacts) -> int | None:
    total = facts.num_blocks_total
    return None if total is None else total * facts.block_size


def cancel(state: SchedulerState, request_id: str) -> SchedulerState:
    """Cancel at any lifecycle point: a successor generation, terminal (0x0C).

    Any plan, result or receipt bound to the old generation is stale after this.
    """
    view = state.views[request_id]
    if view.lifecycle.is_terminal:
        return state
    views = _copy(state.views)
    cancelled = _replace(view, lifecycle=Lifecycle.CANCELLED, finish_reason=FinishReason.CANCELLED)
    views[request_id] = _replace(cancelled, generation=view.generation + 1)
    queues = _Queues(state)
    queues.leave(request_id)
    waits = state.release_waits
    if request_id in waits:  # a cancelled request waits on nothing
        waits = {rid: count for rid, count in waits.items() if rid != request_id}
    return _successor(state, views, *queues.frozen(), state.finished + (request_id,),
                      now=state.now, decision_id=state.decision_id, touched=(request_id,),
                      left=(request_id,), release_waits=waits)


def with_prefix_hits(state: SchedulerState, hits: Mapping[str, int]) -> SchedulerState:
    """Publish the memory owner's prefix-hit facts for waiting requests
    (F62); they hold for this cut only (every successor starts without)."""
    if not hits and not state.prefix_hits:
        return state
    return dataclasses.replace(state, prefix_hits=dict(hits))


def with_claimed_prefix_rows(state: SchedulerState, hits: Mapping[str, int],
                             reclaimed: Mapping[str, int] | None = None) -> SchedulerState:
    """Publish the allocator's verified prefix hits (0x0E: U = S - H_hit): a
    waiting request that has computed nothing starts its computed (and
    committed) frontier at its hit, so its prefill plans only uncached rows.
    The capacity facts do not change; ``reclaimed`` (request id -> blocks a
    claim took from the evictable cache, records/prefix_claims) becomes the
    state's ``reclaimed_prefix_blocks``, which the plan charges to each
    claimer, for this cut only."""
    if not hits:
        return state
    views = _copy(state.views)
    for rid, num_rows in hits.items():
        view = views[rid]
        if view.lifecycle is not Lifecycle.WAITING or view.num_computed or view.num_emitted:
            raise ValueError(f"{rid}: a prefix hit is published only for a fresh waiting request")
        if not 0 < num_rows < view.num_prompt_tokens:
            raise ValueError(f"{rid}: prefix hit {num_rows} outside (0, p={view.num_prompt_tokens})")
        views[rid] = _replace(view, num_computed=num_rows, num_committed=num_rows)
    successor = _successor(state, views, state.waiting, state.running, state.suspended,
                           state.finished, now=state.now, decision_id=state.decision_id,
                           touched=hits)
    if not reclaimed:
        return successor
    if not set(reclaimed) <= set(hits) or min(reclaimed.values()) <= 0:
        raise ValueError(f"reclaimed blocks {dict(reclaimed)} must be > 0 for claimed requests")
    return dataclasses.replace(successor, reclaimed_prefix_blocks=dict(reclaimed))


def claimed_prefix_rows(state: SchedulerState) -> dict[str, int]:
    """The prefix hits the state holds for waiting requests (0x0E): a fresh
    waiting request computes nothing before it runs, so a computed frontier
    there is a published hit. The decision log records them; replay publishes them again."""
    waiting = state.waiting
    if not waiting:
        return {}
    # runs twice per decision over the whole waiting queue: the filter to the
    # few waiting views that computed anything runs at C speed (``compress``)
    views = state.views
    held = [views[rid] for rid in compress(waiting, map(_COMPUTED, map(views.__getitem__,
                                                                       waiting)))]
    return {view.request_id: view.num_computed
            for view in sorted(held, key=_REQUEST_ID) if not view.num_emitted}


_COMPUTED = operator.attrgetter("num_computed")
_REQUEST_ID = operator.attrgetter("request_id")


def without_claimed_prefix_rows(state: SchedulerState, request_ids: Iterable[str]) -> SchedulerState:
    """Withdraw published prefix hits of waiting requests (their computed
    frontier back to 0): a claim lasts one decision, so a waiting request
    never holds blocks another request needs (0x0E)."""
    views = _copy(state.views)
    request_ids = list(request_ids)
    for rid in request_ids:
        views[rid] = _replace(views[rid], num_computed=0, num_committed=0)
    return _successor(state, views, state.waiting, state.running, state.suspended,
                      state.finished, now=state.now, decision_id=state.decision_id,
                      touched=request_ids)


def with_readiness(state: SchedulerState, ready: dict[str, bool]) -> SchedulerState:
    """Publish readiness flags from foreign facts (0x0C); a new snapshot for
    every view whose flag changes, so plans bound to the old one are stale."""
    if not ready:
        return state
    views = _copy(state.views)
    flipped = []
    for rid, is_ready in ready.items():
        view = views[rid]
        if bool(view.is_ready) != bool(is_ready) and not view.lifecycle.is_terminal:
            flipped.append(rid)
        views[rid] = _replace(view, is_ready=is_ready)
    return _successor(state, views, state.waiting, state.running, state.suspended,
                      state.finished, now=state.now, decision_id=state.decision_id,
                      touched=ready, flipped=flipped)
