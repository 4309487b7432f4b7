"""Canonical JSON forms of the records, for decision logs and replay.

Encoding is canonical (sorted keys, no whitespace) so digests are stable
across runs and PYTHONHASHSEED values. Decoding is strict: unknown fields are
rejected, and fields that would leak hidden truth or physical memory layout
into a plan raise :class:`InformationLeak` (0x01A negative fixtures).
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Mapping, Sequence
from typing import Any

from iterserve.records import errors as E
from iterserve.records.canonical_json import canonical_json
from iterserve.records.columns import field_columns
from iterserve.records.log_columns import decode_table, encode_table
from iterserve.records.plan import IntentKind, IterationPlan, QueueIntent, WorkItem
from iterserve.records.receipts import (
    ForeignBinding,
    ForeignStatus,
    PreservationResult,
    ReleaseResult,
    preserved_at_once,
)
from iterserve.records.result import CompletedInterval, IterationResult, WorkFailure
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.records.victim import victim_score_of
from iterserve.records.view import FinishReason, Lifecycle, RequestView, WorkKind

LEAK_FIELDS = frozenset(
    {"realized_output_tokens", "fixture_only_hidden_truth", "block_ids", "block_table",
     "physical_blocks", "slot_mapping"}
)


def dumps(obj: object) -> str:
    """Canonical text (sorted keys, compact, ASCII); orjson-fast, stdlib bytes."""
    return canonical_json(obj)


def state_to_json(state: SchedulerState) -> dict[str, Any]:
    """The canonical state; ``ledger`` appears only when the run keeps one, so
    the digests of runs without one are unchanged."""
    return state_fields_to_json(
        state, [view_to_json(state.views[rid]) for rid in sorted(state.views)])


def state_fields_to_json(state: SchedulerState, views: object,
                         waiting: object = None) -> dict[str, Any]:
    """:func:`state_to_json` with ``views`` as its ``views`` value (the
    incremental digest puts a marker there and splices the encoded views)
    and ``waiting`` as its ``waiting`` value, when given."""
    record = {
        "decision_id": state.decision_id,
        "state_version": state.state_version,
        "now": state.now,
        "waiting": list(state.waiting) if waiting is None else waiting,
        "running": list(state.running),
        "suspended": list(state.suspended),
        "finished": list(state.finished),
        "views": views,
        # the decision log's wire keys, fixed by its format (replay and the
        # state digest read them): the fields are max_num_batched_tokens, max_num_seqs
        "token_budget": state.max_num_batched_tokens,
        "sequence_budget": state.max_num_seqs,
        "capacity": capacity_to_json(state.capacity),
        "service": dict(sorted(state.service.items())),
    }
    if state.ledger is not None:
        record["ledger"] = state.ledger.to_json()
    if state.prefix_hits:
        record["prefix_hits"] = dict(sorted(state.prefix_hits.items()))
    if state.reclaimed_prefix_blocks:  # absent unless a claim reclaimed evictable blocks
        record["reclaimed_prefix_blocks"] = dict(sorted(state.reclaimed_prefix_blocks.items()))
    if state.release_waits:  # absent unless a request waits on a release in flight (0x06)
        record["release_waits"] = dict(sorted(state.release_waits.items()))
    return record


def capacity_to_json(facts: CapacityFacts) -> dict[str, Any]:
    """``releases_at_once`` is written only when False (every log before it
    came from a memory owner that releases at once); ``num_blocks_pending_release``
    only when some are (older logs keep their bytes)."""
    doc: dict[str, Any] = {"block_size": facts.block_size,
                           "num_blocks_total": facts.num_blocks_total,
                           "num_blocks_free": facts.num_blocks_free}
    if not facts.releases_at_once:
        doc["releases_at_once"] = False
    if facts.num_blocks_pending_release:
        doc["num_blocks_pending_release"] = facts.num_blocks_pending_release
    return doc


def capacity_from_json(obj: Mapping[str, Any]) -> CapacityFacts:
    return CapacityFacts(int(obj["block_size"]), obj["num_blocks_total"], obj["num_blocks_free"],
                         bool(obj.get("releases_at_once", True)),
                         int(obj.get("num_blocks_pending_release", 0)))


# Enum ``.value`` is a Python-level descriptor; these run once per view or
# work item per decision (the decision log's hot path)
_LIFECYCLE_VALUES = {member: member.value for member in Lifecycle}


def view_to_json(view: RequestView) -> list[Any]:
    return [
        view.request_id, view.generation, view.snapshot_version, view.client_id, view.priority,
        view.arrival, view.arrival_order, view.num_prompt_tokens, view.max_output_tokens,
        view.num_emitted, view.num_computed, view.num_committed,
        _LIFECYCLE_VALUES[view.lifecycle],
        view.is_ready, view.suspension_epoch, view.first_token_time, view.last_output_time,
        None if view.finish_reason is None else view.finish_reason.value,
    ]


def pair_element(first: str | None, second: str | None) -> int:
    """A neighbour pair's element: :func:`multiset_element` of the canonical
    text of ``[first, second]``."""
    return multiset_element(dumps([first, second]).encode())


def multiset_element(text: bytes) -> int:
    """An element of an additive multiset hash: sha256 of a canonical text
    (a view's ``dumps(view_to_json(view))``, brackets included) as a
    big-endian integer."""
    return int.from_bytes(hashlib.sha256(text).digest(), "big")


def multiset_hex(total: int) -> str:
    """A sum of :func:`multiset_element` values modulo 2**256, as 64 hex digits."""
    return f"{total % _MULTISET_MODULUS:064x}"


_MULTISET_MODULUS = 1 << 256


def state_text_digest(state: SchedulerState) -> str:
    """The state digest of decision-log formats 1 to 3: sha256 of the whole
    canonical state text (every view's text, at every decision). Replay
    checks those logs with it."""
    return hashlib.sha256(dumps(state_to_json(state)).encode()).hexdigest()


def plan_to_json(plan: IterationPlan, *, with_work: bool = True) -> dict[str, Any]:
    """``with_work`` False: without ``work`` (a caller that writes it as
    columns, :func:`work_columns`)."""
    doc = {
        "decision_id": plan.decision_id,
        "input_state_version": plan.input_state_version,
        "policy": {"id": plan.policy_id, "version": plan.policy_version},
        # one unpack per item: a NamedTuple field read costs about three; keys in
        # sorted order (the encoder's sort finds them so); ``kind._value_``: an
        # Enum's ``value`` is a Python-level property, and a dict keyed by an
        # Enum hashes it in Python (``Enum.__hash__``)
        "tokens_used": plan.tokens_used,
        "sequences_used": plan.sequences_used,
        "tie_break_key": list(plan.tie_break_key),
        "intents": [
            {"kind": i.kind.value, "request_id": i.request_id, "generation": i.generation,
             "reason": i.reason}
            for i in plan.intents
        ],
    }
    if plan.release_waits:  # absent when none: older logs keep their bytes (0x06)
        doc["release_waits"] = list(plan.release_waits)
    if with_work:
        doc["work"] = [
            {"end": end, "generation": generation, "kind": kind._value_, "request_id": rid,
             "snapshot_version": snapshot, "start": start, "tie_break": list(tie_break)}
            for rid, generation, snapshot, start, end, kind, _, tie_break in plan.work
        ]
    return doc


#: a plan's work items and a result's completed intervals as columns (decision
#: log format 5): one array per field, in these names' order per row
WORK_COLUMNS = ("request_id", "generation", "snapshot_version", "start", "end", "kind",
                "tie_break")
COMPLETED_COLUMNS = ("request_id", "generation", "start", "end", "emitted", "token_id",
                     "finish_reason")
_ENUM_VALUE = operator.attrgetter("_value_")  # an Enum's ``value`` is a Python-level property


def work_columns(work: Sequence[WorkItem]) -> dict[str, Any]:
    """``plan_to_json(plan)["work"]`` transposed: one array per field of
    :data:`WORK_COLUMNS` (row ``i`` of each is item ``i``'s), made at C
    speed. :func:`rows_of_columns` gives the rows back."""
    if not work:
        return {name: [] for name in WORK_COLUMNS}
    rids, generations, snapshots, starts, ends, kinds, _, keys = field_columns(work)
    return {"request_id": rids, "generation": generations, "snapshot_version": snapshots,
            "start": starts, "end": ends, "kind": list(map(_ENUM_VALUE, kinds)),
            "tie_break": keys}


def completed_columns(completed: Sequence[CompletedInterval]) -> dict[str, Any]:
    """``result_to_json(result)["completed"]`` transposed, as :func:`work_columns`."""
    if not completed:
        return {name: [] for name in COMPLETED_COLUMNS}
    rids, generations, starts, ends, emitted, tokens, reasons = field_columns(completed)
    if reasons.count(None) != len(reasons):
        reasons = tuple(None if reason is None else reason._value_ for reason in reasons)
    return {"request_id": rids, "generation": generations, "start": starts, "end": ends,
            "emitted": emitted, "token_id": tokens, "finish_reason": reasons}


#: format 6: the forms each field's column may take (:mod:`~iterserve.records.log_columns`);
#: ``tie_break``'s are each key column's. A completion's id, generation and interval are
#: its work item's where every work item completed, in order
# the forms each field tries. ``numbered`` ids and ``steps`` would shave another
# quarter of the bytes but cost the log's writer (the follower, the slower of a
# simulation's two processes) about half again per line; the reader takes them
WORK_HINTS = {"generation": ("runs",), "end": ("plus:start",), "kind": ("runs",),
              "tie_break": ("same:request_id", "same:generation", "runs")}
COMPLETED_HINTS = {"request_id": ("same:work.request_id",),
                   "generation": ("same:work.generation", "runs"),
                   "start": ("same:work.start",), "end": ("same:work.end", "plus:start"),
                   "emitted": ("runs",), "finish_reason": ("runs",)}
_SHARED_WITH_WORK = ("request_id", "generation", "start", "end")


def work_table(columns: Mapping[str, Any], num_rows: int) -> dict[str, Any]:
    """:func:`work_columns`' ``columns`` as a format-6 table
    (:mod:`~iterserve.records.log_columns`)."""
    return encode_table(columns, WORK_COLUMNS, num_rows, WORK_HINTS)


def completed_table(columns: Mapping[str, Any], num_rows: int,
                    work: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`completed_columns`' ``columns`` as a format-6 table whose
    columns may be ``same`` as the plan's ``work`` columns."""
    return encode_table(columns, COMPLETED_COLUMNS, num_rows, COMPLETED_HINTS,
                        known=_work_known(work))


def columns_of_tables(work: Any, completed: Any) -> tuple[dict[str, list[Any]],
                                                          dict[str, list[Any]]]:
    """A format-6 line's work and completion tables as columns (format 5's
    form); ``ValueError`` naming ``work: FIELD`` or ``completed: FIELD`` and
    the problem."""
    try:
        work_decoded = decode_table(work, WORK_COLUMNS)
    except ValueError as exc:
        raise ValueError(f"work: {exc}") from None
    try:
        return work_decoded, decode_table(completed, COMPLETED_COLUMNS,
                                          known=_work_known(work_decoded))
    except ValueError as exc:
        raise ValueError(f"completed: {exc}") from None


def _work_known(work: Mapping[str, Any]) -> dict[str, Any]:
    return {f"work.{name}": work[name] for name in _SHARED_WITH_WORK}


def rows_of_columns(columns: Mapping[str, Any], names: tuple[str, ...]) -> list[dict[str, Any]]:
    """The row objects of :func:`work_columns` or :func:`completed_columns`'
    ``columns`` (``names``: their field names). ``ValueError`` naming the
    problem unless ``columns`` has exactly those keys, each an array, all
    of one length."""
    if not isinstance(columns, Mapping):
        raise ValueError("must be an object of arrays, one per field")
    missing = [name for name in names if name not in columns]
    unknown = sorted(set(columns) - set(names))
    if missing or unknown:
        raise ValueError(f"{(missing or unknown)[0]} {'missing' if missing else 'is not a field'}")
    arrays = [columns[name] for name in names]
    for name, array in zip(names, arrays, strict=True):
        if not isinstance(array, list):
            raise ValueError(f"{name} must be an array")
    if len({len(array) for array in arrays}) > 1:
        lengths = ", ".join(f"{name} {len(array)}" for name, array in zip(names, arrays,
                                                                          strict=True))
        raise ValueError(f"the arrays differ in length ({lengths})")
    return [dict(zip(names, row, strict=True)) for row in zip(*arrays, strict=True)]


def _check_fields(obj: Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = set(obj) - allowed
    leaks = extra & LEAK_FIELDS
    if leaks:
        raise E.InformationLeak(f"{where} carries {sorted(leaks)}")
    if extra:
        raise E.ContractViolation(f"{where} has unknown field(s) {sorted(extra)}")


_WORK_FIELDS = {"request_id", "generation", "snapshot_version", "start", "end", "kind",
                "tie_break", "positions"}
_INTENT_FIELDS = {"kind", "request_id", "generation", "reason"}
_PLAN_FIELDS = {"decision_id", "input_state_version", "policy", "work", "tokens_used",
                "sequences_used", "tie_break_key", "intents", "release_waits"}


def plan_from_json(obj: Mapping[str, Any]) -> IterationPlan:
    _check_fields(obj, _PLAN_FIELDS, "plan")
    work = []
    for w in obj["work"]:
        _check_fields(w, _WORK_FIELDS, f"work {w.get('request_id')}")
        start, end = int(w["start"]), int(w["end"])
        positions = _positions(w.get("positions"), start, end)
        work.append(WorkItem(w["request_id"], int(w["generation"]), int(w["snapshot_version"]),
                             start, end, WorkKind(w["kind"]), positions,
                             tuple(w.get("tie_break", ()))))
    for i in obj.get("intents", ()):
        _check_fields(i, _INTENT_FIELDS, f"intent {i.get('request_id')}")
    _check_fields(obj["policy"], {"id", "version"}, "plan.policy")
    intents = tuple(
        QueueIntent(IntentKind(i["kind"]), i["request_id"], int(i["generation"]),
                    i.get("reason", ""), victim_score_of(i.get("reason", "")))
        for i in obj.get("intents", ())
    )
    return IterationPlan(
        decision_id=int(obj["decision_id"]), input_state_version=int(obj["input_state_version"]),
        policy_id=obj["policy"]["id"], policy_version=obj["policy"]["version"], work=tuple(work),
        tokens_used=int(obj["tokens_used"]), sequences_used=int(obj["sequences_used"]),
        tie_break_key=tuple(obj.get("tie_break_key", ())), intents=intents,
        release_waits=_release_waits(obj.get("release_waits", [])),
    )


def _release_waits(listed: Any) -> tuple[str, ...]:
    """A logged plan's ``release_waits``: request ids (a malformed one is a
    contract violation, like any malformed plan field)."""
    if not isinstance(listed, list) or not all(isinstance(rid, str) for rid in listed):
        raise E.ContractViolation("plan.release_waits must be a list of request ids")
    return tuple(listed)


def _positions(listed: list[int] | None, start: int, end: int) -> range:
    """Logged positions as a range; a non-contiguous trace becomes an empty
    range, which the validator then rejects as forged."""
    if listed is None:
        return range(start, end)
    if listed and listed == list(range(listed[0], listed[0] + len(listed))):
        return range(listed[0], listed[0] + len(listed))
    return range(0)


def result_to_json(result: IterationResult, plan: IterationPlan | None = None,
                   state: SchedulerState | None = None, *,
                   with_completed: bool = True) -> dict[str, Any]:
    """``receipts`` is written only for receipts that do not follow from
    ``plan`` and ``state`` (see :func:`preserved_at_once`): a synchronous
    run's result reads as it did before receipts existed. ``with_completed``
    False: without ``completed`` (a caller that writes it as columns,
    :func:`completed_columns`)."""
    doc = _result_doc(result, with_completed)
    implied = _implied_receipts(result.failures, plan, state)
    explicit = [r for r in result.receipts if r not in implied]
    if explicit:
        doc["receipts"] = [_receipt_to_json(r) for r in explicit]
    releases = [r for r in result.releases if not _is_implied_release(r, plan)]
    if releases:
        doc["releases"] = [_release_to_json(r) for r in releases]
    return doc


def _is_implied_release(release: ReleaseResult, plan: IterationPlan | None) -> bool:
    """A READY release answering an intent of ``plan``: the transition reads
    the intent alone the same way, so the log leaves it out (the logs of a
    memory owner that releases at once stay as they were)."""
    return plan is not None and release.status is ForeignStatus.READY and any(
        intent.request_id == release.binding.request_id for intent in plan.intents)


def _release_to_json(release: ReleaseResult) -> dict[str, Any]:
    b = release.binding
    return {"request_id": b.request_id, "generation": b.generation,
            "snapshot_digest": b.snapshot_digest, "suspension_epoch": b.suspension_epoch,
            "status": release.status.value, "reclaimed_bytes": release.reclaimed_bytes}


def _release_from_json(obj: Mapping[str, Any]) -> ReleaseResult:
    binding = ForeignBinding(obj["request_id"], int(obj["generation"]),
                             obj["snapshot_digest"], int(obj["suspension_epoch"]))
    return ReleaseResult(binding, ForeignStatus(obj["status"]), int(obj["reclaimed_bytes"]))


def _implied_receipts(failures: tuple[WorkFailure, ...], plan: IterationPlan | None,
                      state: SchedulerState | None) -> tuple[PreservationResult, ...]:
    if plan is None or state is None:
        return ()
    return preserved_at_once(plan, state, {f.request_id for f in failures})


def _receipt_to_json(receipt: PreservationResult) -> dict[str, Any]:
    b = receipt.binding
    return {"request_id": b.request_id, "generation": b.generation,
            "snapshot_digest": b.snapshot_digest, "suspension_epoch": b.suspension_epoch,
            "status": receipt.status.value,
            "exact_ready_prefix_tokens": receipt.exact_ready_prefix_tokens}


def _receipt_from_json(obj: Mapping[str, Any]) -> PreservationResult:
    binding = ForeignBinding(obj["request_id"], int(obj["generation"]),
                             obj["snapshot_digest"], int(obj["suspension_epoch"]))
    return PreservationResult(binding, ForeignStatus(obj["status"]),
                              int(obj["exact_ready_prefix_tokens"]))


def _result_doc(result: IterationResult, with_completed: bool = True) -> dict[str, Any]:
    doc = {
        "decision_id": result.decision_id,
        "input_state_version": result.input_state_version,
        "failures": [
            {"request_id": f.request_id, "generation": f.generation, "reason": f.reason}
            for f in result.failures
        ],
        "service": dict(sorted(result.service.items())),
        "duration": result.duration,
        "capacity": None if result.capacity is None else capacity_to_json(result.capacity),
    }
    if with_completed:
        doc["completed"] = [  # one unpack per interval (as the plan's work above)
            {"emitted": emitted, "end": end,
             "finish_reason": None if reason is None else reason._value_,
             "generation": generation, "request_id": rid, "start": start, "token_id": token_id}
            for rid, generation, start, end, emitted, token_id, reason in result.completed
        ]
    return doc


def result_from_json(obj: Mapping[str, Any], plan: IterationPlan | None = None,
                     state: SchedulerState | None = None) -> IterationResult:
    """The logged result, with the receipts its ``plan`` and ``state`` imply."""
    completed = tuple(
        CompletedInterval(
            c["request_id"], int(c["generation"]), int(c["start"]), int(c["end"]),
            bool(c["emitted"]), c.get("token_id"),
            None if c.get("finish_reason") is None else FinishReason(c["finish_reason"]),
        )
        for c in obj["completed"]
    )
    failures = tuple(
        WorkFailure(f["request_id"], int(f["generation"]), f["reason"])
        for f in obj.get("failures", ())
    )
    return IterationResult(
        decision_id=int(obj["decision_id"]), input_state_version=int(obj["input_state_version"]),
        completed=completed, failures=failures, service=dict(obj.get("service", {})),
        duration=float(obj.get("duration", 1.0)),
        capacity=None if obj.get("capacity") is None else capacity_from_json(obj["capacity"]),
        receipts=_receipts_from_json(obj.get("receipts", ()), failures, plan, state),
        releases=tuple(_release_from_json(r) for r in obj.get("releases", ())),
    )


def _receipts_from_json(listed: Any, failures: tuple[WorkFailure, ...],
                        plan: IterationPlan | None,
                        state: SchedulerState | None) -> tuple[PreservationResult, ...]:
    """The logged receipts, plus the implied READY one of every preserve
    intent the log lists no receipt for."""
    explicit = tuple(_receipt_from_json(r) for r in listed)
    named = {r.binding.request_id for r in explicit}
    implied = tuple(r for r in _implied_receipts(failures, plan, state)
                    if r.binding.request_id not in named)
    return implied + explicit
