"""IterationPlan: versioned policy output, not a batch tensor (0x00B, 0x01A).

A plan authorizes an attempt and advances nothing. Each work item binds the
request id, generation and snapshot version it was chosen against, one
interval ``[start, end)``, and the derived kind and positions, which the
validator recomputes (a policy cannot forge them).
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import is_not
from typing import TYPE_CHECKING, NamedTuple

from iterserve.records.columns import FieldColumns, field_columns
from iterserve.records.preemption import PreemptionMode
from iterserve.records.reservation import ReservationDecision
from iterserve.records.victim import VictimScore
from iterserve.records.view import WorkKind

if TYPE_CHECKING:  # records/dependencies imports this module (through receipts)
    from iterserve.records.dependencies import ReadinessDependency


class WorkItem(NamedTuple):
    """One legal token interval of one request generation (a NamedTuple for
    hot-path speed, like RequestView).

    ``tie_break`` is the policy's ordering key for this item, recorded so
    replay and validation can recompute it (0x01A "tie-break evidence").
    """

    request_id: str
    generation: int
    snapshot_version: int
    start: int
    end: int
    kind: WorkKind
    positions: range
    tie_break: tuple[object, ...] = ()

    @property
    def width(self) -> int:
        return self.end - self.start


class Work(FieldColumns[WorkItem]):
    """A plan's work items, transposed into field columns once for every
    layer that reads them a column at a time (:mod:`~iterserve.records.columns`)."""


# Readers of WorkItem fields in C, for loops over a plan's work: a NamedTuple
# field read is a Python-level descriptor lookup, several times an itemgetter's
#: ``(kind, start, end)`` of a work item
work_kind_span = operator.itemgetter(*map(WorkItem._fields.index, ("kind", "start", "end")))
#: ``request_id`` of a work item
work_request_id = operator.itemgetter(WorkItem._fields.index("request_id"))
#: ``tie_break`` of a work item
work_tie_break = operator.itemgetter(WorkItem._fields.index("tie_break"))
#: ``kind`` of a work item
work_kind = operator.itemgetter(WorkItem._fields.index("kind"))
#: ``start`` of a work item
work_start = operator.itemgetter(WorkItem._fields.index("start"))
#: ``end`` of a work item
work_end = operator.itemgetter(WorkItem._fields.index("end"))
_PREFILL_CHUNK, _DECODE_ROW, _REBUILD = WorkKind.PREFILL_CHUNK, WorkKind.DECODE_ROW, WorkKind.REBUILD


def rows_by_kind(work: Sequence[WorkItem]) -> tuple[int, int, int]:
    """``(prefill, decode, rebuild)`` rows of a plan's work: from its
    columns, the decode rows as all rows less the others, which are summed
    item by item (a plan holds a few: the chunks of its admissions and
    rebuilds, beside up to a sequence budget of decode rows). Kinds are told
    apart by identity: an Enum hashes in Python (``Enum.__hash__``), so a
    dict keyed by kind cost a Python call per lookup, two per item."""
    if not work:
        return 0, 0, 0
    _, _, _, starts, ends, kinds, _, _ = field_columns(work)
    num_rows = sum(ends) - sum(starts)
    if kinds.count(_DECODE_ROW) == len(kinds):  # count compares by identity first
        return 0, num_rows, 0
    num_prefill = num_rebuild = 0
    for index in compress(range(len(kinds)), map(is_not, kinds, repeat(_DECODE_ROW))):
        kind, rows = kinds[index], ends[index] - starts[index]
        if kind is _PREFILL_CHUNK:
            num_prefill += rows
        elif kind is _REBUILD:
            num_rebuild += rows
        else:
            raise KeyError(kind)
    return num_prefill, num_rows - num_prefill - num_rebuild, num_rebuild


class IntentKind(enum.Enum):
    """Queue intents a plan may carry; the transition applies them (0x00B)."""

    ADMIT = "admit"  # waiting -> running
    PREEMPT_RECOMPUTE = "preempt_recompute"  # running -> waiting, computed rows dropped
    PREEMPT_PRESERVE_EXACT = "preempt_preserve"  # running -> suspended, rows kept elsewhere
    RESUME = "resume"  # suspended -> running
    REJECT = "reject"  # waiting -> terminal (overload contract)
    ABORT = "abort"  # live -> terminal (no way to make progress)
    GUARD = "guard"  # running, unchanged: the starvation guard forced its interval (0x09A)


_PREEMPT_KINDS = {PreemptionMode.RECOMPUTE: IntentKind.PREEMPT_RECOMPUTE,
                  PreemptionMode.SWAP: IntentKind.PREEMPT_PRESERVE_EXACT,
                  PreemptionMode.ABORT: IntentKind.ABORT}
_MODES = {kind: mode for mode, kind in _PREEMPT_KINDS.items()}


def preempt_intent_kind(mode: PreemptionMode) -> IntentKind:
    """The queue intent that preempts in ``mode`` (0x0C)."""
    return _PREEMPT_KINDS[mode]


def preemption_mode_of(kind: IntentKind) -> PreemptionMode | None:
    """The preemption mode a preempting intent carries out; None for the others
    (ABORT is an ending, not a preemption, in this direction)."""
    return None if kind is IntentKind.ABORT else _MODES.get(kind)


@dataclass(frozen=True, slots=True)
class QueueIntent:
    """``victim``: a preemption's score inputs and tie-break as fields
    (0x0C); its reason is then ``victim.reason()``, the text the log writes."""

    kind: IntentKind
    request_id: str
    generation: int
    reason: str = ""
    victim: VictimScore | None = None

    def __post_init__(self) -> None:
        if self.victim is not None and self.reason != self.victim.reason():
            raise ValueError(f"{self.request_id}: the reason of a victim record is its fields' text")


@dataclass(frozen=True, slots=True)
class IterationPlan:
    """The decision for one iteration.

    ``tokens_used``/``sequences_used`` are the plan's own budget ledger; the
    validator checks them against the work (ledger drift is an error).
    ``tie_break_key`` names the ordering fields the items' keys hold.
    ``reservations``: the policy's reservation intents (ORCA's n_rsrv,
    0x03), one per initiation it selects, in selection order; checked
    against the state by validation, and not written to the decision log
    (replay derives them again with the plan). ``dependencies``: per
    selected row whose request waits on foreign facts, (request id, the
    READY facts it depends on) in plan order (records/dependencies), bound
    by the engine; off the log too. ``release_waits``: the running requests
    this plan waits, holding their blocks and with no victim, because blocks
    whose release is in flight cover their need (0x06 TEMPORARILY_UNAVAILABLE;
    records/release_waits), in plan order; the log writes it when not empty.
    """

    decision_id: int
    input_state_version: int
    policy_id: str
    policy_version: str
    work: tuple[WorkItem, ...]
    tokens_used: int
    sequences_used: int
    tie_break_key: tuple[str, ...] = ()
    intents: tuple[QueueIntent, ...] = ()
    reservations: tuple[ReservationDecision, ...] = ()
    dependencies: tuple[tuple[str, tuple[ReadinessDependency, ...]], ...] = ()
    release_waits: tuple[str, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.work and not self.intents


def make_work(
    request_id: str,
    generation: int,
    snapshot_version: int,
    start: int,
    end: int,
    kind: WorkKind,
    tie_break: tuple[object, ...] = (),
) -> WorkItem:
    """A work item whose positions are range(start, end) by construction."""
    return WorkItem(
        request_id, generation, snapshot_version, start, end, kind, range(start, end), tie_break
    )
