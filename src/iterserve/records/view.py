"""Per-request service views: the factual frontiers a policy decides from.

Frontiers (0x01A): ``p`` prompt tokens, ``e`` emitted output tokens, ``c``
computed tokens, ``k`` all-layer committed cache rows. At a published decision
boundary ``k == c``. Phase labels are derived from these frontiers, never
stored (STYLE habit 2).
"""

from __future__ import annotations

import enum
import operator
from typing import NamedTuple

from iterserve.records import frontier
from iterserve.records.frontier import WorkKind
from iterserve.records.spec import SloTargets

__all__ = ["FinishReason", "IllegalTransition", "Lifecycle", "RequestView", "TRANSITIONS",
           "WorkKind", "check_transition", "derive_kind"]


class Lifecycle(enum.Enum):
    """Request lifecycle (0x0C); transitions are checked against TRANSITIONS."""

    # ``value`` read in C (orjson reads it for every RUNNING view it encodes;
    # Enum's own is a Python-level property)
    value = property(operator.attrgetter("_value_"))

    WAITING = "waiting"
    RUNNING = "running"
    PREEMPT_PENDING = "preempt_pending"
    SUSPENDED_PRESERVED = "suspended_preserved"
    SUSPENDED_RECOMPUTE = "suspended_recompute"
    RESUME_PENDING = "resume_pending"
    FINISHED = "finished"
    CANCELLED = "cancelled"
    REJECTED = "rejected"
    ABORTED = "aborted"

    __hash__ = object.__hash__  # members are singletons; Enum's own hash is slow Python

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset(
    {Lifecycle.FINISHED, Lifecycle.CANCELLED, Lifecycle.REJECTED, Lifecycle.ABORTED}
)
#: ``lifecycle in TERMINAL_LIFECYCLES``: ``is_terminal`` without a property call (hot paths)
TERMINAL_LIFECYCLES = _TERMINAL

#: The explicit table of allowed lifecycle transitions (0x0C). Any non-terminal
#: state may be cancelled; terminal states are final.
TRANSITIONS: dict[Lifecycle, frozenset[Lifecycle]] = {
    Lifecycle.WAITING: frozenset({Lifecycle.RUNNING, Lifecycle.REJECTED}),
    Lifecycle.RUNNING: frozenset(
        {Lifecycle.FINISHED, Lifecycle.PREEMPT_PENDING, Lifecycle.WAITING}
    ),
    Lifecycle.PREEMPT_PENDING: frozenset(
        {Lifecycle.SUSPENDED_PRESERVED, Lifecycle.SUSPENDED_RECOMPUTE}
    ),
    Lifecycle.SUSPENDED_PRESERVED: frozenset({Lifecycle.RESUME_PENDING, Lifecycle.SUSPENDED_RECOMPUTE}),
    Lifecycle.SUSPENDED_RECOMPUTE: frozenset({Lifecycle.RESUME_PENDING, Lifecycle.WAITING}),
    Lifecycle.RESUME_PENDING: frozenset({Lifecycle.RUNNING}),
    Lifecycle.FINISHED: frozenset(),
    Lifecycle.CANCELLED: frozenset(),
    Lifecycle.REJECTED: frozenset(),
    Lifecycle.ABORTED: frozenset(),
}
for _state in Lifecycle:
    if not _state.is_terminal:
        TRANSITIONS[_state] = TRANSITIONS[_state] | {Lifecycle.CANCELLED, Lifecycle.ABORTED}


class IllegalTransition(ValueError):
    """A lifecycle change that the transition table does not allow."""

    def __init__(self, source: Lifecycle, target: Lifecycle) -> None:
        allowed = ", ".join(sorted(s.name for s in TRANSITIONS[source])) or "none (terminal)"
        super().__init__(
            f"illegal lifecycle transition {source.name} -> {target.name} "
            f"({source.value} -> {target.value}); allowed from {source.name}: {allowed}"
        )
        self.source = source
        self.target = target


def check_transition(before: Lifecycle, after: Lifecycle) -> Lifecycle:
    """Return ``after`` when the table allows ``before -> after`` (staying put
    is always allowed), else raise :class:`IllegalTransition`."""
    if before is not after and after not in TRANSITIONS[before]:
        raise IllegalTransition(before, after)
    return after


class FinishReason(enum.Enum):
    STOP = "stop"  # EOS, stop token or stop string; or hidden realized length in the simulator
    LENGTH = "length"  # max_output_tokens reached
    ABORT = "abort"  # aborted by the engine (e.g. preemption mode ABORT, no memory ever)
    CANCELLED = "cancelled"  # cancelled by the client
    REJECTED = "rejected"  # refused by an overload contract


class RequestView(NamedTuple):
    """One request's factual, versioned service view at a scheduler cut.

    A NamedTuple rather than a frozen dataclass: the transition builds one per
    live request per iteration, and a frozen dataclass's ``__init__`` runs
    Python code for each field where a tuple is built in C (0x01A allows
    packed records on the hot path). It is just as immutable.

    ``generation`` changes on cancellation/append (a successor generation);
    ``snapshot_version`` changes whenever any frontier changes, so a plan bound
    to an older snapshot is stale. ``arrival_order`` is the declared arrival
    rank used by tie-break keys. ``slo`` and the output forecasts are the
    client's declarations (never realized lengths): they travel on the view so
    a policy decides from the state alone; constant per request, they stay
    out of the state digest (the log header's workload records them).
    """

    request_id: str
    generation: int
    snapshot_version: int
    client_id: str
    priority: int
    arrival: float  # run clock (records/__init__: Time)
    arrival_order: int
    num_prompt_tokens: int
    max_output_tokens: int
    num_emitted: int = 0
    num_computed: int = 0
    num_committed: int = 0
    lifecycle: Lifecycle = Lifecycle.WAITING
    is_ready: bool = True
    suspension_epoch: int = 0
    first_token_time: float | None = None
    last_output_time: float | None = None
    finish_reason: FinishReason | None = None
    slo: SloTargets | None = None
    output_forecast: float | None = None
    output_forecast_p90: float | None = None

    @property
    def is_terminal(self) -> bool:
        return self.lifecycle.is_terminal

    @property
    def target(self) -> int:
        """Computed frontier the request must reach before its next decode row:
        see :func:`frontier.target` (0x01A, 0x0C)."""
        return frontier.target(self.num_prompt_tokens, self.num_emitted)

    @property
    def logical_length(self) -> int:
        return frontier.rows_through_next_emission(self.num_prompt_tokens, self.num_emitted)

    @property
    def next_kind(self) -> WorkKind:
        """The phase of the next interval, derived from the frontiers."""
        return frontier.next_kind(self.num_prompt_tokens, self.num_emitted, self.num_computed)

    @property
    def is_prefill(self) -> bool:
        return self.next_kind is WorkKind.PREFILL_CHUNK

    @property
    def is_rebuilding(self) -> bool:
        return self.next_kind is WorkKind.REBUILD

    @property
    def is_decoding(self) -> bool:
        return self.next_kind is WorkKind.DECODE_ROW

    @property
    def remaining_rows(self) -> int:
        """Rows to compute before a decode row is next (0 when decoding)."""
        return frontier.rows_to_target(self.num_prompt_tokens, self.num_emitted,
                                       self.num_computed)


# Readers of RequestView fields in C, for loops over many views: a NamedTuple
# field read is a Python-level descriptor lookup, several times an itemgetter's
def view_field(name: str) -> operator.itemgetter[object]:
    """An ``operator.itemgetter`` of the RequestView field ``name``."""
    return operator.itemgetter(RequestView._fields.index(name))


#: ``lifecycle`` of a view
view_lifecycle = view_field("lifecycle")
#: ``num_emitted`` of a view
view_num_emitted = view_field("num_emitted")
#: ``client_id`` of a view
view_client_id = view_field("client_id")


def derive_kind(view: RequestView, start: int, end: int) -> WorkKind | None:
    """The only legal annotation of ``[start, end)`` for ``view``, or None
    (:func:`iterserve.records.frontier.interval_kind` on the view's frontiers)."""
    return frontier.interval_kind(view.num_prompt_tokens, view.num_emitted, view.num_computed,
                                  start, end)
