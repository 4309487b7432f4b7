"""The scheduling passes policies share: each walks views in the order a
policy gives and hands every request its legal interval through the
builder's ledgers. A policy picks the order, the rows and the victim
chooser; the loops, the stop rules and the preemption step live here once.

- :func:`schedule_in_key_order`: the baselines (one key, admit on the way);
- :func:`running_pass`: running requests first, preempting on a KV shortfall
  (vLLM's running loop, Sarathi-Serve's decode pass);
- :func:`resume_suspended`: preserved requests, oldest suspension first;
- :func:`waiting_pass`: admissions under ``max_num_seqs`` and the budgets;
- :func:`resume_then_admit`: resume every preserved request before any new one;
- :func:`schedule_ranked`: every live request in one rank order (deadlines,
  mlfq), the waiting ones from a kept order (:mod:`iterserve.plan.kept_order`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from iterserve.plan.builder import PlanBuilder, views_of
from iterserve.plan.kept_order import KeptRanks, Key
from iterserve.plan.victims import VictimChooser, add_or_preempt, least_urgent_victim
from iterserve.records import frontier
from iterserve.records.keys import key_function
from iterserve.records.state import SchedulerState
from iterserve.records.view import Lifecycle, RequestView

RowsOf = Callable[[RequestView], int]


class RunningPass(NamedTuple):
    """What a running pass leaves: the running queue without its victims,
    and the ids it preempted (non-empty: vLLM runs no waiting pass)."""

    queue: list[RequestView]
    gone: set[str]


def schedule_in_key_order(builder: PlanBuilder, state: SchedulerState,
                          key: tuple[str, ...]) -> None:
    """Give every live request its legal interval in ``key`` order while the
    budgets allow; waiting requests are admitted (shared by the baselines)."""
    live = views_of(state, state.running) + views_of(state, state.waiting)
    for view in sorted(live, key=key_function(key, state)):
        if not builder.can_add():
            break
        builder.take(view)


def running_pass(builder: PlanBuilder, running: list[RequestView], rows_of: RowsOf,
                 choose_victim: VictimChooser,
                 skip: Callable[[RequestView], bool] | None = None) -> RunningPass:
    """Schedule ``rows_of(view)`` rows of each running request in order
    (``skip`` passes some over), preempting victims on a KV shortfall; the
    pass stops when the budgets run out or a request preempts itself.

    ``rows_of`` must give a decoding request at least one row while tokens
    are left (every policy's: legal rows capped by a positive limit): runs
    of plain decode steps then take :meth:`PlanBuilder.add_decode_rows`,
    the plan that walking each through :func:`add_or_preempt` gives, in one
    loop (tests/oracles/running_pass_reference.py walks them; the tests hold
    the two equal)."""
    queue = builder.not_aborted(running)
    gone: set[str] = set()  # victims preempted earlier in this pass
    views = list(queue)
    index = 0
    while index < len(views):
        if not gone:  # no victim yet: the queue is the snapshot
            index = builder.add_decode_rows(views, index, skip)
            if index == len(views):
                break
        view = views[index]
        index += 1
        if view.request_id in gone or (skip is not None and skip(view)):
            continue
        if not builder.can_add():
            break
        if not add_or_preempt(builder, view, rows_of(view), queue, gone, choose_victim):
            break
    return RunningPass(queue, gone)


def resume_suspended(builder: PlanBuilder, state: SchedulerState,
                     max_rows: int | None = None) -> int:
    """Resume preserved requests in suspension order while memory allows;
    the first that does not fit stops the pass. Returns how many resumed
    (an aborted request counts: it no longer waits to resume). A request
    whose preservation is still in flight (PREEMPT_PENDING) is skipped: it
    cannot resume yet, and does not count as resumed (0x0C)."""
    resumed = 0
    for view in views_of(state, state.suspended):
        if builder.is_aborted(view):
            resumed += 1
            continue
        if view.lifecycle is Lifecycle.PREEMPT_PENDING:
            continue
        if not builder.can_add() or not view.is_ready:
            break
        if not builder.resume(view, max_rows):
            break
        resumed += 1
    return resumed


def waiting_pass(builder: PlanBuilder, waiting: Iterable[RequestView],
                 rows_of: RowsOf | None = None, *, full_isl: bool = False) -> None:
    """Admit ready waiting requests in order while ``max_num_seqs`` and the
    budgets allow; the first that is not admitted stops the pass. With
    ``rows_of`` (vLLM) a request whose rows do not fit the KV ledger stops
    it before admission is tried; with ``full_isl`` too, its whole sequence
    (p + e - c rows: prompt plus outputs so far) must fit, as vLLM 0.32's
    ``scheduler_reserve_full_isl`` requires."""
    for view in waiting:
        if builder.running_slots_left <= 0 or not builder.can_add():
            break
        if not view.is_ready or builder.is_aborted(view):
            continue
        rows = None if rows_of is None else rows_of(view)
        if rows is not None and not builder.fits_memory(view, rows):
            break
        if rows is not None and full_isl and not builder.can_never_fit(view) and (
                not builder.fits_memory(view, _whole_sequence_rows(view))):
            break
        if not builder.admit(view, rows):
            break


def _whole_sequence_rows(view: RequestView) -> int:
    """Rows of the sequence so far not yet computed: p + e - c (vLLM's
    ``request.num_tokens`` less its computed tokens)."""
    return frontier.rows_of_sequence_left(view.num_prompt_tokens, view.num_emitted,
                                          view.num_computed)


def resume_then_admit(builder: PlanBuilder, state: SchedulerState,
                      waiting: Iterable[RequestView],
                      rows_of: RowsOf | None = None, max_rows: int | None = None, *,
                      full_isl: bool = False) -> None:
    """Preserved requests go before new work: the waiting pass runs only
    when every suspended request resumed."""
    if resume_suspended(builder, state, max_rows) == len(state.suspended):
        waiting_pass(builder, waiting, rows_of, full_isl=full_isl)


def schedule_ranked(builder: PlanBuilder, ranked: list[tuple[Key, RequestView]],
                    waiting: KeptRanks) -> None:
    """Legal intervals in rank order over ``ranked`` (the running and
    suspended requests with their rank keys, sorted) and the waiting ones
    ``waiting`` keeps in the same key order: waiting requests are admitted
    and suspended ones resumed when they fit; running ones preempt the least
    urgent running requests (in the run's mode, 0x0C) on a KV shortfall, and
    the pass stops when one preempts itself (as vLLM's).

    The waiting requests ranked between two others are walked lazily, and
    skipped at once when none of them can be admitted
    (:meth:`KeptOrder.admits_none`): a refused admission changes nothing, so
    the plan is the one walking each gives."""
    victims = [view for _, view in ranked
               if view.lifecycle is Lifecycle.RUNNING and not builder.is_aborted(view)]
    gone: set[str] = set()
    walk = _WaitingWalk(builder, waiting)
    for key, view in ranked:
        if not walk.admit_before(key) or not builder.can_add():
            return
        if view.request_id in gone or builder.is_aborted(view):
            continue
        if view.lifecycle is Lifecycle.WAITING:
            builder.admit(view)
        elif view.lifecycle is not Lifecycle.RUNNING:
            builder.resume(view)
        else:
            rows = builder.rows_within_tokens(view)
            if not add_or_preempt(builder, view, rows, victims, gone, least_urgent_victim):
                return
    walk.admit_before(None)


class _WaitingWalk:
    """The kept waiting requests of :func:`schedule_ranked`, walked in order
    up to each other request's rank."""

    __slots__ = ("_builder", "_ranks", "_views", "_position")

    def __init__(self, builder: PlanBuilder, ranks: KeptRanks) -> None:
        self._builder, self._ranks = builder, ranks
        self._views = ranks.state.views
        self._position = 0

    def admit_before(self, key: Key | None) -> bool:
        """Admit the kept requests ranked before ``key`` (all when None)
        while they fit; False when the budgets ran out (the pass ends)."""
        order, builder = self._ranks.order, self._builder
        end = len(order) if key is None else self._ranks.before(key)
        if self._position >= end:
            return True
        if not builder.can_add():
            return False
        if order.admits_none(builder.num_blocks_free, builder.tokens_left):
            self._position = end
            return True
        skip, views = self._ranks.skip, self._views
        limit = order.rows_limit(builder.num_blocks_free, builder.tokens_left)
        for _, rid, rows in order.elements(self._position, end):
            self._position += 1
            if (rows is not None and rows > limit) or rid in skip:
                continue  # refused for blocks (changing nothing), or ranked elsewhere
            view = views[rid]
            if builder.is_aborted(view) or not builder.admit(view):
                continue
            if not builder.can_add():
                return False
            if order.admits_none(builder.num_blocks_free, builder.tokens_left):
                self._position = end
                return True
            limit = order.rows_limit(builder.num_blocks_free, builder.tokens_left)
        return True
