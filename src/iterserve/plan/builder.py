"""The plan mechanism every policy shares (0x01A, 0x05).

A policy orders and chooses; :class:`PlanBuilder` clamps each request to its
only legal interval (0x01A), keeps every ledger (tokens, sequences, KV
blocks, and the running cap ``max_num_seqs``), records tie-break evidence
and emits the plan in key order. A policy never builds a ``WorkItem`` by
hand and never counts budgets itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from itertools import repeat
from operator import add, itemgetter

from iterserve.admission.screen import ReservationScreen
from iterserve.plan.contract import Policy
from iterserve.plan.preemption_cost import PreemptionCosts
from iterserve.records import frontier
from iterserve.records.frontier import next_interval
from iterserve.records.keys import key_function, keys_function
from iterserve.records.kv_abi import blocks_opened, opens_block
from iterserve.records.plan import (
    IntentKind,
    IterationPlan,
    QueueIntent,
    Work,
    WorkItem,
    preempt_intent_kind,
    work_tie_break,
)
from iterserve.records.preemption import PreemptionCause, PreemptionMode
from iterserve.records.reservation import ReservationDecision
from iterserve.records.rows_bound import bound_of
from iterserve.records.state import RunRules, SchedulerState
from iterserve.records.victim import VictimScore
from iterserve.records.view import Lifecycle, RequestView

_new_tuple = tuple.__new__  # NamedTuple.__new__ is slow on the hot path
_DECODE = frontier.WorkKind.DECODE_ROW
#: ``(request_id, is_ready)`` of a view, in C
_id_and_ready = itemgetter(*map(RequestView._fields.index, ("request_id", "is_ready")))
#: a view's ``request_id``, ``generation``, ``snapshot_version``, ``num_computed``, in C
_DECODE_COLUMNS = tuple(map(itemgetter, map(RequestView._fields.index, (
    "request_id", "generation", "snapshot_version", "num_computed"))))
_PROMPT, _EMITTED, _COMPUTED = (itemgetter(RequestView._fields.index(name)) for name in (
    "num_prompt_tokens", "num_emitted", "num_computed"))


class PlanBuilder:
    """Accumulates legal work under the token, sequence and KV ledgers.

    KV feasibility is logical (blocks from the published capacity facts);
    the allocator still publishes the physical result (0x00D).
    """

    __slots__ = ("_state", "_policy", "_key", "_work", "_intents", "tokens_left", "seqs_left",
                 "_facts", "num_blocks_free", "_max_num_batched_tokens", "_screen", "_preempt_kind",
                 "_max_running", "_num_joined", "_aborted", "_blocks", "_masks",
                 "num_blocks_releasing", "_costs", "_reclaimed", "_reservations", "_release_waits")

    def __init__(self, policy: Policy, state: SchedulerState,
                 max_num_batched_tokens: int | None = None, *, max_num_seqs: int | None = None,
                 max_running: int | None = None) -> None:
        """``max_num_batched_tokens`` and ``max_num_seqs`` may only tighten the
        state's budgets (e.g. tau, ORCA's max batch size). ``max_running``
        caps the running set (running + resumed + admitted; vLLM's
        ``max_num_seqs``), the state's sequence budget when None. The
        state's run rules bring the admission screen and preemption mode."""
        self._state = state
        self._policy = policy
        self._key = key_function(policy.tie_break_key, state)
        self._work: dict[str, WorkItem] = {}  # id -> its item, in the order chosen
        self._blocks: dict[str, int] = {}  # id -> KV blocks its item charged, when any
        self._intents: list[QueueIntent] = []
        self._reservations: list[ReservationDecision] = []  # the policy's n_rsrv intents
        self._facts = state.capacity
        # a claimed prefix hit's blocks taken from the evictable cache: the
        # facts count them free, so the claimer's first interval pays them
        self._reclaimed = state.reclaimed_prefix_blocks
        self._max_num_batched_tokens = _tightened(state.max_num_batched_tokens,
                                                  max_num_batched_tokens)
        self.tokens_left = self._max_num_batched_tokens
        self.seqs_left = _tightened(state.max_num_seqs, max_num_seqs)
        self.num_blocks_free = state.capacity.num_blocks_free  # None: unbounded
        # blocks a memory owner that does not release at once is releasing
        # (this plan's preemptions and aborts, and earlier ones still
        # PREEMPT_PENDING), not yet claimed by a request waiting for them:
        # never free in this plan (PREEMPT_PENDING is not free capacity, 0x0C)
        self.num_blocks_releasing = 0 if state.capacity.releases_at_once else _pending_blocks(state)
        self._max_running = state.max_num_seqs if max_running is None else max_running
        self._num_joined = 0  # requests resumed or admitted into the running set
        self._screen = ReservationScreen.for_state(state)
        self._preempt_kind = preemption_kind(state.rules)
        self._costs: PreemptionCosts | None = None  # made at the first cost-chosen preemption
        self._aborted: set[str] = set()
        self._release_waits: dict[str, None] = {}  # requests waited on a release in flight
        self._masks: tuple[list[RequestView], list[bool], list[bool]] | None = None
        if self._facts.num_blocks_total is not None:
            self._abort_what_never_fits()

    def can_add(self) -> bool:
        return self.tokens_left > 0 and self.seqs_left > 0

    @property
    def running_slots_left(self) -> int:
        """Room left under ``max_running`` for requests joining the running
        set (the running queue counts whole, preempted victims included)."""
        return self._max_running - len(self._state.running) - self._num_joined

    def legal_rows(self, view: RequestView) -> int:
        """Width of the widest legal interval now: 1 for decode, else the
        rows left to the target (prompt, or rebuild target, 0x0C)."""
        return frontier.legal_rows(view.num_prompt_tokens, view.num_emitted, view.num_computed)

    def rows_within_tokens(self, view: RequestView) -> int:
        """``min(legal_rows(view), tokens_left)`` in one frontier call (the
        running pass asks it of every running request)."""
        left = self.tokens_left
        if left <= 0:
            return min(self.legal_rows(view), left)
        return next_interval(view.num_prompt_tokens, view.num_emitted, view.num_computed, left)[0]

    def blocks_needed(self, view: RequestView, num_rows: int) -> int:
        blocks = blocks_opened(view.num_computed, num_rows, self._facts.block_size)
        if self._reclaimed:
            blocks += self._reclaimed.get(view.request_id, 0)
        return blocks

    def fits_memory(self, view: RequestView, num_rows: int) -> bool:
        free = self.num_blocks_free
        return free is None or self.blocks_needed(view, num_rows) <= free

    def fits_after_release(self, view: RequestView, num_rows: int) -> bool:
        """Whether ``num_rows`` more rows would fit once the releases this
        plan asks for are READY: the request then runs in a later plan,
        bound to the revised capacity fact (0x0C)."""
        free = self.num_blocks_free
        return free is None or self.blocks_needed(view, num_rows) <= free + self.num_blocks_releasing

    def wait_for_release(self, view: RequestView, num_rows: int) -> None:
        """Hold for ``view`` the blocks ``num_rows`` more rows need, free ones
        first, then ones this plan's releases will free; it gets no work in
        this plan (no later request of the plan may take them)."""
        free = self.num_blocks_free
        if free is None:
            return
        need = self.blocks_needed(view, num_rows)
        taken = min(free, need)
        self.num_blocks_free = free - taken
        self.num_blocks_releasing -= need - taken

    def waits_for_release(self, view: RequestView, num_rows: int) -> bool:
        """``num_rows`` more rows of ``view`` do not fit now but fit once the
        releases in flight complete (0x06: TEMPORARILY_UNAVAILABLE): the
        request may wait, holding its blocks, with no victim chosen for it
        (:meth:`wait_on_release`), unless it has waited the run's bound."""
        pending = self._facts.num_blocks_pending_release
        free = self.num_blocks_free
        return bool(pending) and free is not None and (
            free < self.blocks_needed(view, num_rows) <= free + pending)

    def num_release_waits(self, view: RequestView) -> int:
        """Consecutive decisions before this one whose plan waited ``view``
        on a release in flight (the state's count, records/release_waits)."""
        return self._state.release_waits.get(view.request_id, 0)

    @property
    def max_release_waits(self) -> int:
        """The run's bound on those waits (``kv.extension_wait_max_iterations``):
        a request that has waited it is FAILED, not waiting (0x06)."""
        return self._state.rules.extension_wait_max_iterations

    def wait_on_release(self, view: RequestView) -> None:
        """Record that this plan waits ``view`` on a release in flight (the
        plan's ``release_waits``; the transition counts it). A request that
        gets work or an intent later in the plan is not waiting after all."""
        self._release_waits[view.request_id] = None

    def add_if_fits(self, view: RequestView, num_rows: int) -> bool:
        """:meth:`fits_memory` then :meth:`add` in one call (the running
        pass asks it of every running request); False, changing nothing,
        when ``num_rows`` more rows do not fit the KV ledger."""
        free = self.num_blocks_free
        if free is not None and (self.blocks_needed(view, num_rows) if self._reclaimed else
                                 blocks_opened(view.num_computed, num_rows,
                                               self._facts.block_size)) > free:
            return False
        self.add(view, num_rows)
        return True

    def add_decode_rows(self, views: list[RequestView], start: int,
                        skip: Callable[[RequestView], bool] | None = None) -> int:
        """The running pass's batched path: from ``views[start]`` on, give
        each request in a plain decode step (0x01A: :func:`frontier.decode_steps`) its
        one row, exactly as :meth:`add_if_fits` with one row would, and stop
        at the first view that needs more than that (another kind of
        interval, budgets spent, or a KV shortfall that may preempt). A
        view ``skip`` passes over, or one :meth:`add` would refuse (not
        ready, already chosen), changes nothing. Returns the index of the
        first view not handled (``len(views)``: all).

        One loop picks the views (two fields read by one C-level itemgetter
        per view; the budgets become one count of rows left: a row costs a
        token and a sequence); their items are then made a column at a time
        (:meth:`_add_decode_items`)."""
        work, blocks_of, aborted = self._work, self._blocks, self._aborted
        is_decode, opens = self._decode_masks(views)
        free = self.num_blocks_free
        rows_left = min(self.tokens_left, self.seqs_left)
        chosen: list[RequestView] = []
        index = start
        for index in range(start, len(views)):
            if not is_decode[index] or len(chosen) >= rows_left:
                break
            view = views[index]
            rid, is_ready = _id_and_ready(view)
            if skip is not None and skip(view):
                continue
            opens_block = free is not None and opens[index]
            # a shortfall: the per-row path may preempt
            if opens_block and free < 1:  # type: ignore[operator]
                break
            if rid in work or rid in aborted or not is_ready:
                continue  # add() grants nothing and the pass goes on
            if opens_block:
                free -= 1  # type: ignore[operator]
                blocks_of[rid] = 1
            # holds the request's place in plan order (and refuses it a second
            # row) until _add_decode_items writes its item there
            work[rid] = view  # type: ignore[assignment]
            chosen.append(view)
        else:
            index = len(views)
        self.num_blocks_free = free
        self.tokens_left -= len(chosen)
        self.seqs_left -= len(chosen)
        if chosen:
            self._add_decode_items(chosen)
        return index

    def _add_decode_items(self, views: list[RequestView]) -> None:
        """The one-row decode items of ``views`` (each already holding its
        place in ``_work``): the fields a column at a time and every
        tie-break key in one call (the keys :meth:`add` would compute one
        by one)."""
        rids, generations, versions, starts = (
            list(map(getter, views)) for getter in _DECODE_COLUMNS)
        ends = list(map(add, starts, repeat(1)))
        keys = keys_function(self._policy.tie_break_key, self._state)(views)
        self._work.update(zip(rids, map(_new_tuple, repeat(WorkItem), zip(
            rids, generations, versions, starts, ends, repeat(_DECODE),
            map(range, starts, ends), keys)), strict=True))

    def _decode_masks(self, views: list[RequestView]) -> tuple[list[bool], list[bool]]:
        """Per view of ``views``: whether its next interval is a plain decode
        row, and whether that row opens a KV block; computed once per list
        (a running pass hands the same snapshot list back after each view it
        walks itself), a column at a time."""
        masks = self._masks
        if masks is None or masks[0] is not views:
            ps, es, cs = (list(map(_PROMPT, views)), list(map(_EMITTED, views)),
                          list(map(_COMPUTED, views)))
            masks = self._masks = (views, frontier.decode_steps(ps, es, cs),
                                   opens_block(cs, self._facts.block_size))
        return masks[1], masks[2]

    def add(self, view: RequestView, max_rows: int | None = None) -> int:
        """Schedule up to ``max_rows`` of ``view``'s legal interval; rows granted.

        Decode is exactly one row; prefill and rebuild take
        min(remaining, max_rows, tokens left). Zero when nothing fits the
        budgets or the KV ledger (the caller may then preempt).
        """
        rid = view.request_id
        if rid in self._work or rid in self._aborted or not view.is_ready or self.seqs_left == 0:
            return 0
        c = view.num_computed
        limit = self.tokens_left
        if max_rows is not None and max_rows < limit:
            limit = max_rows
        rows, kind = next_interval(view.num_prompt_tokens, view.num_emitted, c, limit)
        if rows == 0:
            return 0
        blocks = 0
        end = c + rows
        free = self.num_blocks_free
        if free is not None:
            blocks = blocks_opened(c, rows, self._facts.block_size)
            if self._reclaimed:
                blocks += self._reclaimed.get(rid, 0)
            if blocks > free:
                return 0
            self.num_blocks_free = free - blocks
        item = _new_tuple(WorkItem, (rid, view.generation, view.snapshot_version, c, end, kind,
                                     range(c, end), self._key(view)))
        self._work[rid] = item
        if blocks:
            self._blocks[rid] = blocks
        self.tokens_left -= rows
        self.seqs_left -= 1
        return rows

    def unschedule(self, view: RequestView) -> None:
        """Remove ``view``'s work from this plan, refunding every ledger."""
        item = self._work.pop(view.request_id)
        blocks = self._blocks.pop(view.request_id, 0)
        self.tokens_left += item.end - item.start
        self.seqs_left += 1
        if self.num_blocks_free is not None:
            self.num_blocks_free += blocks

    def reserve(self, decision: ReservationDecision) -> None:
        """Publish a reservation intent with the plan (ORCA's n_rsrv, 0x03):
        a logical counter of the policy's, never an allocation."""
        self._reservations.append(decision)

    def intend(self, kind: IntentKind, view: RequestView, reason: str = "") -> None:
        self._intents.append(QueueIntent(kind, view.request_id, view.generation, reason))

    def admit(self, view: RequestView, max_rows: int | None = None, reason: str = "") -> int:
        """Admit a waiting request and schedule its first interval, if the
        run's admission screen (0x06) reserves room for it."""
        if self._can_never_fit(view):
            self.abort(view)
            return 0
        screen = self._screen
        if screen is not None and not screen.fits(view):
            return 0
        rows = self.add(view, max_rows)
        if rows:
            self.intend(IntentKind.ADMIT, view, reason)
            self._num_joined += 1
            if screen is not None:
                screen.reserve(view)
        return rows

    def can_never_fit(self, view: RequestView) -> bool:
        """True when waiting cannot help: admission aborts such a request."""
        return self._can_never_fit(view)

    def _can_never_fit(self, view: RequestView) -> bool:
        """The rows needed for this request's next emission (p + e; p before
        its first) exceed the whole pool: waiting cannot help, so the
        mechanism aborts it with a reason rather than stall (nothing lost)."""
        total = self._facts.num_blocks_total
        if total is None:
            return False
        rows = frontier.rows_through_next_emission(view.num_prompt_tokens, view.num_emitted)
        return self._facts.blocks_for(rows) > total

    def _abort_what_never_fits(self) -> None:
        """Abort every live request whose next step can never fit the whole
        device pool, at the first decision that proves it (0x0C): running,
        suspended or waiting, in any preemption mode. Nothing a policy or a
        preemption does can make room, so waiting would only stall the run."""
        state = self._state
        views = state.views
        facts = self._facts
        assert facts.num_blocks_total is not None
        # blocks_for(rows) > total exactly when rows > total * block_size
        max_rows = facts.num_blocks_total * facts.block_size
        through = frontier.rows_through_next_emission
        if bound_of(views, state.rows_bound) <= max_rows:
            # the common case, O(1) per decision: the bound the transitions
            # carry (>= every view's p + e) fits the pool, nothing to abort
            return
        for queue in (state.running, state.suspended, state.waiting):
            for rid in queue:
                view = views[rid]
                if through(view.num_prompt_tokens, view.num_emitted) > max_rows:
                    self.abort(view)

    def abort(self, view: RequestView, reason: str = "exceeds_kv_capacity") -> None:
        """End a live request with ``reason`` (once per plan): its scheduled
        work is removed and the device blocks it holds are released
        (:meth:`_release`)."""
        rid = view.request_id
        if rid in self._aborted:
            return
        self._aborted.add(rid)
        if rid in self._work:
            self.unschedule(view)
        if view.lifecycle is Lifecycle.RUNNING:
            self._release(view)
        self.intend(IntentKind.ABORT, view, reason)

    def is_aborted(self, view: RequestView) -> bool:
        return view.request_id in self._aborted

    def not_aborted(self, views: list[RequestView]) -> list[RequestView]:
        """``views`` without the aborted ones, in order (a copy; no call per
        view in the common case, a plan that aborts nothing)."""
        if not self._aborted:
            return list(views)
        return [view for view in views if view.request_id not in self._aborted]

    def take(self, view: RequestView, max_rows: int | None = None) -> int:
        """Schedule a live request's next interval, admitting it if it waits."""
        if view.lifecycle is Lifecycle.WAITING:
            return self.admit(view, max_rows)
        return self.add(view, max_rows)

    def preempt(self, view: RequestView, kind: IntentKind | None = None,
                reason: str = PreemptionCause.KV_EXHAUSTED.value,
                victim: VictimScore | None = None) -> None:
        """Preempt a running request: its scheduled work (if any) is removed
        and its held blocks released (:meth:`_release`). ``victim``: the
        choice's score inputs (its reason is their text)."""
        if view.request_id in self._work:
            self.unschedule(view)
        self._release(view)
        if kind is None:
            kind, victim = self._mode_for(view, victim)
        self._intents.append(QueueIntent(kind, view.request_id, view.generation,
                                         reason if victim is None else victim.reason(), victim))

    def _mode_for(self, view: RequestView,
                  victim: VictimScore | None) -> tuple[IntentKind, VictimScore | None]:
        """The run's preemption intent; under ``cheaper``, the mode whose
        planning cost is lower for this victim, both costs kept in its
        victim record (0x0C)."""
        if self._preempt_kind is not None:
            return self._preempt_kind, victim
        if self._costs is None:
            self._costs = PreemptionCosts.of(self._state.rules)
        choice = self._costs.choose(view)
        if victim is not None:
            victim = replace(victim, recompute_ms=choice.recompute_ms,
                             preserve_ms=choice.preserve_ms)
        return preempt_intent_kind(choice.mode), victim

    def _release(self, view: RequestView) -> None:
        """Count the blocks ``view`` holds as released by this plan: free now
        when the memory owner releases at once (its published fact, 0x0D);
        otherwise pending, free only in a later fact once its matching READY
        release arrives (PREEMPT_PENDING is not free capacity, 0x0C)."""
        if self.num_blocks_free is None:
            return
        held = self._facts.blocks_for(view.num_computed)
        if self._facts.releases_at_once:
            self.num_blocks_free += held
        else:
            self.num_blocks_releasing += held

    def resume(self, view: RequestView, max_rows: int | None = None, reason: str = "") -> int:
        """Resume a suspended (preserved) request: its rows come back onto
        device blocks, then its next interval is scheduled. Rows granted."""
        if view.lifecycle is Lifecycle.PREEMPT_PENDING:  # preservation still in flight
            return 0
        held = self._facts.blocks_for(view.num_computed)
        if self.num_blocks_free is not None:
            if held > self.num_blocks_free:
                return 0
            self.num_blocks_free -= held
        rows = self.add(view, max_rows)
        if rows:
            self.intend(IntentKind.RESUME, view, reason)
            self._num_joined += 1
        elif self.num_blocks_free is not None:
            self.num_blocks_free += held
        return rows

    def is_chosen(self, request_id: str) -> bool:
        return request_id in self._work

    @property
    def num_scheduled(self) -> int:
        return len(self._work)

    def build(self) -> IterationPlan:
        work = sorted(self._work.values(), key=work_tie_break)
        return IterationPlan(
            decision_id=self._state.decision_id,
            input_state_version=self._state.state_version,
            policy_id=self._policy.policy_id,
            policy_version=self._policy.policy_version,
            work=Work(work),
            tokens_used=self._max_num_batched_tokens - self.tokens_left,
            sequences_used=len(work),
            tie_break_key=self._policy.tie_break_key,
            intents=tuple(self._intents),
            reservations=tuple(self._reservations),
            release_waits=self._waits_left() if self._release_waits else (),
        )

    def _waits_left(self) -> tuple[str, ...]:
        """The recorded release waits of requests this plan gave no work and
        no intent (a later victim choice or a freed block changed them)."""
        named = {intent.request_id for intent in self._intents}
        return tuple(rid for rid in self._release_waits
                     if rid not in self._work and rid not in named)


def views_of(state: SchedulerState, request_ids: Iterable[str]) -> list[RequestView]:
    return list(map(state.views.__getitem__, request_ids))  # C-level: runs over every queue


def iter_views(state: SchedulerState, request_ids: Iterable[str]) -> Iterator[RequestView]:
    """:func:`views_of`, lazily: a pass that stops early (the waiting pass
    at its first misfit) reads only the views it reaches, not a long queue."""
    return map(state.views.__getitem__, request_ids)


def _pending_blocks(state: SchedulerState) -> int:
    """Blocks held by requests whose release or preservation is in flight
    (PREEMPT_PENDING): free once its READY receipt arrives."""
    views, facts = state.views, state.capacity
    return sum(facts.blocks_for(views[rid].num_computed) for rid in state.suspended
               if views[rid].lifecycle is Lifecycle.PREEMPT_PENDING)


def _tightened(budget: int, limit: int | None) -> int:
    return budget if limit is None or limit >= budget else limit


def preemption_kind(rules: RunRules) -> IntentKind | None:
    """The intent of the run's preemption mode (workload ``kv.preemption_mode``,
    0x0C); None under ``cheaper``, which chooses per victim."""
    if rules.preemption_mode is PreemptionMode.CHEAPER:
        return None
    return preempt_intent_kind(rules.preemption_mode)
