"""Event log: the facts shared by the simulator, the real engine and the bench client.

Every record is a frozen, slotted fact stamped with ``time_s`` on the run's own
clock (virtual for the simulator, monotonic wall time for the engine and the
client). Events describe what *happened*; nothing here is a plan or a
prediction. The metrics evaluator (0x07) derives every clock, outcome and rate
from these records alone, so two producers that emit the same facts produce the
same report.

Data flow::

    producer --append--> EventLog --write_jsonl--> run.events.jsonl
    run.events.jsonl --read_jsonl--> EventLog --evaluate--> Report

Invariants enforced here (per record): finite non-negative ``time_s``,
non-empty ids and reasons, non-negative counts. The per-request lifecycle
(arrival first, one terminal outcome, consecutive token indices) is checked by
:mod:`iterserve.metrics.timeline`. ``EventLog`` itself enforces a single
non-decreasing clock.

Hidden truth stays hidden (DESIGN rule 5): no record carries a request's
realized output length before it is observed through token and finish events.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from iterserve.records.jsonl import json_objects


class EventLogError(ValueError):
    """An event or event sequence violates the event contract."""


@dataclass(frozen=True, slots=True)
class _EventBase:
    time_s: float  # seconds on the run's clock
    request_id: str

    kind: ClassVar[str] = ""

    def __post_init__(self) -> None:
        if (
            not isinstance(self.time_s, int | float)
            or isinstance(self.time_s, bool)
            or not math.isfinite(self.time_s)
        ):
            raise EventLogError(f"{self.kind}: time_s must be a finite number, got {self.time_s!r}")
        if self.time_s < 0:
            raise EventLogError(f"{self.kind}: time_s must be >= 0, got {self.time_s}")
        _require_text(self.kind, "request_id", self.request_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class ArrivalEvent(_EventBase):
    """The request reached the system: its ORIGINAL arrival, origin of TTFT (F30)."""

    client_id: str = "default"
    num_prompt_tokens: int | None = None  # public prompt length, when known

    kind: ClassVar[str] = "arrival"

    def __post_init__(self) -> None:
        _EventBase.__post_init__(self)
        _require_text(self.kind, "client_id", self.client_id)
        if self.num_prompt_tokens is not None:
            _require_count(self.kind, "num_prompt_tokens", self.num_prompt_tokens)


@dataclass(frozen=True, slots=True)
class AdmitEvent(_EventBase):
    """Admission control accepted the request (counted in N_adm, 0x07)."""

    kind: ClassVar[str] = "admit"


@dataclass(frozen=True, slots=True, kw_only=True)
class RejectEvent(_EventBase):
    """Admission control refused the request: a user-visible outcome (N_rej, 0x07)."""

    reason: str  # e.g. "max_live", "kv_capacity", "slo_infeasible"

    kind: ClassVar[str] = "reject"

    def __post_init__(self) -> None:
        _EventBase.__post_init__(self)
        _require_text(self.kind, "reason", self.reason)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleEvent(_EventBase):
    """The request was selected into an iteration plan. Planning, not execution:
    no clock, outcome or service total is derived from this event (DESIGN rule 1)."""

    iteration_index: int
    num_rows: int  # rows planned for this request in that iteration

    kind: ClassVar[str] = "schedule"

    def __post_init__(self) -> None:
        _EventBase.__post_init__(self)
        _require_count(self.kind, "iteration_index", self.iteration_index)
        _require_count(self.kind, "num_rows", self.num_rows)


@dataclass(frozen=True, slots=True, kw_only=True)
class ComputeEvent(_EventBase):
    """Completed prompt rows (prefill) or rebuild rows of one request in one
    iteration. Ordinary decode rows are not reported here: their completion is
    the token event. Rebuild rows emit nothing and earn no service (0x0C)."""

    num_rows: int
    is_rebuild: bool = False

    kind: ClassVar[str] = "compute"

    def __post_init__(self) -> None:
        _EventBase.__post_init__(self)
        _require_count(self.kind, "num_rows", self.num_rows)
        if not isinstance(self.is_rebuild, bool):
            raise EventLogError(f"{self.kind}: is_rebuild must be a bool")


@dataclass(frozen=True, slots=True)
class FirstTokenEvent(_EventBase):
    """Output token 0 was emitted (y_{r,0}); closes the TTFT clock (0x07)."""

    kind: ClassVar[str] = "first_token"


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenEvent(_EventBase):
    """A later output token was emitted (y_{r,j}, j >= 1); closes one TBT gap."""

    token_index: int  # 0-based output index; the first token is FirstTokenEvent

    kind: ClassVar[str] = "token"

    def __post_init__(self) -> None:
        _EventBase.__post_init__(self)
        if not isinstance(self.token_index, int) or self.token_index < 1:
            raise EventLogError(f"token: token_index must be an int >= 1, got {self.token_index!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishEvent(_EventBase):
    """Successful completion (EOS, stop sequence, max tokens). Failures are
    reported as :class:`CancelEvent` with a reason, never as a finish."""

    reason: str  # e.g. "eos", "stop_sequence", "max_tokens"
    num_output_tokens: int  # must equal the number of emitted tokens

    kind: ClassVar[str] = "finish"

    def __post_init__(self) -> None:
        _EventBase.__post_init__(self)
        _require_text(self.kind, "reason", self.reason)
        _require_count(self.kind, "num_output_tokens", self.num_output_tokens)


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelEvent(_EventBase):
    """The request ended without successful completion: client disconnect,
    timeout, engine error. Counted as unfinished with reason ``cancelled``."""

    reason: str = "client"

    kind: ClassVar[str] = "cancel"

    def __post_init__(self) -> None:
        _EventBase.__post_init__(self)
        _require_text(self.kind, "reason", self.reason)


@dataclass(frozen=True, slots=True, kw_only=True)
class PreemptEvent(_EventBase):
    """The request lost its live slot (0x0C). Its clocks keep running."""

    mode: str = "recompute"  # "recompute" or "swap"

    kind: ClassVar[str] = "preempt"

    def __post_init__(self) -> None:
        _EventBase.__post_init__(self)
        _require_text(self.kind, "mode", self.mode)


@dataclass(frozen=True, slots=True)
class ResumeEvent(_EventBase):
    """A preempted request regained a live slot. Never resets TTFT or TBT."""

    kind: ClassVar[str] = "resume"


@dataclass(frozen=True, slots=True)
class NotReadyEvent(_EventBase):
    """A live request became blocked on foreign readiness (0x0C, 0x09B): a
    fact it needs (remote K/V, promotion, layers, allocation, placement) is
    not READY for its current binding. Not ready scheduler work: while every
    live request of a client is blocked, the client is not eligible (F63).
    Emitted only on a change of the engine's published flag."""

    kind: ClassVar[str] = "not_ready"


@dataclass(frozen=True, slots=True)
class ReadyEvent(_EventBase):
    """A blocked live request became ready again (its facts are READY)."""

    kind: ClassVar[str] = "ready"


Event = (
    ArrivalEvent
    | AdmitEvent
    | RejectEvent
    | ScheduleEvent
    | ComputeEvent
    | FirstTokenEvent
    | TokenEvent
    | FinishEvent
    | CancelEvent
    | PreemptEvent
    | ResumeEvent
    | NotReadyEvent
    | ReadyEvent
)

EVENT_TYPES: Mapping[str, type[Event]] = MappingProxyType(
    {
        cls.kind: cls
        for cls in (
            ArrivalEvent,
            AdmitEvent,
            RejectEvent,
            ScheduleEvent,
            ComputeEvent,
            FirstTokenEvent,
            TokenEvent,
            FinishEvent,
            CancelEvent,
            PreemptEvent,
            ResumeEvent,
            NotReadyEvent,
            ReadyEvent,
        )
    }
)


class EventLog:
    """Append-only collector on one non-decreasing clock.

    The log owns its list; callers get immutable tuples back. Appending an
    event earlier than the last one raises: producers emit facts in clock
    order, and a reordered log would hide a clock bug.
    """

    __slots__ = ("_events",)

    def __init__(self, events: Iterable[Event] = ()) -> None:
        self._events: list[Event] = []
        self.extend(events)

    def append(self, event: Event) -> None:
        if not isinstance(event, tuple(EVENT_TYPES.values())):
            raise EventLogError(f"not an event record: {event!r}")
        if self._events and event.time_s < self._events[-1].time_s:
            raise EventLogError(
                f"event at {event.time_s} s precedes the previous event at "
                f"{self._events[-1].time_s} s: {event!r}"
            )
        self._events.append(event)

    def extend(self, events: Iterable[Event]) -> None:
        for event in events:
            self.append(event)

    @property
    def events(self) -> tuple[Event, ...]:
        return tuple(self._events)

    def __iter__(self) -> Iterator[Event]:
        return iter(tuple(self._events))

    def __len__(self) -> int:
        return len(self._events)

    def write_jsonl(self, path: str | Path) -> None:
        write_jsonl(self._events, path)

    @classmethod
    def read_jsonl(cls, path: str | Path) -> EventLog:
        return cls(read_jsonl(path))


def event_to_dict(event: Event) -> dict[str, Any]:
    """One event as a dict with a stable key order: ``kind`` then the fields in
    declaration order (``time_s``, ``request_id``, then kind-specific ones)."""
    record: dict[str, Any] = {"kind": event.kind}
    for field in dataclasses.fields(event):
        record[field.name] = getattr(event, field.name)
    return record


def event_from_dict(record: Mapping[str, Any]) -> Event:
    """Inverse of :func:`event_to_dict`. Unknown kinds or fields raise."""
    fields = dict(record)
    kind = fields.pop("kind", None)
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise EventLogError(f"unknown event kind {kind!r}; valid kinds: {sorted(EVENT_TYPES)}")
    try:
        return cls(**fields)
    except TypeError as error:
        raise EventLogError(f"{kind}: bad fields {sorted(fields)}: {error}") from error


def event_line(event: Event) -> str:
    """``json.dumps(event_to_dict(event), allow_nan=False)``, byte for byte,
    without the dict: the field names of each event class are looked up once
    and each value is encoded as ``json`` encodes it (the hot path of a long
    run writes one line per output token)."""
    names = _FIELD_NAMES.get(type(event))
    if names is None:
        names = _FIELD_NAMES[type(event)] = tuple(
            (f.name, f', {encode_basestring_ascii(f.name)}: ') for f in dataclasses.fields(event))
    parts = ['{"kind": ', encode_basestring_ascii(event.kind)]
    for name, prefix in names:
        parts.append(prefix)
        parts.append(json_text(getattr(event, name)))
    parts.append("}")
    return "".join(parts)


_FIELD_NAMES: dict[type, tuple[tuple[str, str], ...]] = {}


def json_text(value: object) -> str:
    """``json.dumps(value, allow_nan=False)`` of a value an event field holds."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float) and math.isfinite(value):
        return float.__repr__(value)
    return json.dumps(value, allow_nan=False)  # raises on NaN / inf, as write_jsonl always did


def write_jsonl(events: Iterable[Event], path: str | Path) -> None:
    """Write the events as :func:`event_lines` renders them."""
    with Path(path).open("w", encoding="utf-8") as stream:
        stream.writelines(event_lines(events))


def event_lines(events: Iterable[Event]) -> Iterator[str]:
    """The JSONL lines of ``events`` in order, each with its newline: one
    object per event, except that a run of two or more consecutive
    :class:`TokenEvent` s with the same time (the same ``time_s`` text) is
    one ``tokens`` line (:func:`tokens_line`; most of a long run's facts are
    output tokens, and one cut emits a token for each decode row)."""
    runs, out = TokenRuns(), list[str]()
    for event in events:
        if type(event) is TokenEvent:
            runs.add_one(json_text(event.time_s), encode_basestring_ascii(event.request_id),
                         json_text(event.token_index), out)
        else:
            runs.add_line(event_line(event) + "\n", out)
        if out:
            yield from out
            out.clear()
    runs.flush(out)
    yield from out


class TokenRuns:
    """The one writer that joins token facts into runs: consecutive tokens
    with the same time text become one :func:`tokens_line`; any other line
    ends the run. The open run is held until another fact or :meth:`flush`,
    since the next tokens may share its time. Lines go to the ``out`` list
    each call is given (with their newlines)."""

    __slots__ = ("_time_text", "_ids", "_indices")

    def __init__(self) -> None:
        self._time_text = ""
        self._ids: list[str] = []  # the open run's request ids, as JSON strings
        self._indices: list[Any] = []  # its token indices, as ints or JSON texts

    def add_one(self, time_text: str, encoded_id: str, token_index: int | str,
                out: list[str]) -> None:
        if self._ids and time_text != self._time_text:
            self.flush(out)
        self._time_text = time_text
        self._ids.append(encoded_id)
        self._indices.append(token_index)

    def add_run(self, time_text: str, encoded_ids: Sequence[str],
                token_indices: Sequence[int] | Sequence[str], out: list[str]) -> None:
        if self._ids and time_text != self._time_text:
            self.flush(out)
        self._time_text = time_text
        self._ids += encoded_ids
        self._indices += token_indices

    def add_line(self, line: str, out: list[str]) -> None:
        self.flush(out)
        out.append(line)

    def flush(self, out: list[str]) -> None:
        if self._ids:
            out.append(tokens_line(self._time_text, self._ids, self._indices))
            self._ids, self._indices = [], []


#: The kind of a line holding a run of token events (not an event kind).
TOKENS_LINE_KIND = "tokens"
_TOKENS_FIELDS = frozenset(("kind", "time_s", "request_ids", "token_indices"))


def tokens_line(time_text: str, encoded_ids: Sequence[str],
                token_indices: Sequence[int] | Sequence[str]) -> str:
    """The line (with its newline) of a run of token events at one time:
    ``time_text`` the time as JSON, ``encoded_ids`` the request ids as JSON
    strings (``encode_basestring_ascii``), the indices as ints or JSON texts.
    One token is its ``token`` line, as :func:`event_line` writes it; more
    are ``{"kind": "tokens", "time_s": T, "request_ids": [...],
    "token_indices": [...]}``, the tokens in order."""
    if len(encoded_ids) == 1:
        return (f'{{"kind": "token", "time_s": {time_text}, "request_id": {encoded_ids[0]}, '
                f'"token_index": {token_indices[0]}}}\n')
    return (f'{{"kind": "tokens", "time_s": {time_text}, "request_ids": '
            f'[{", ".join(encoded_ids)}], "token_indices": '
            f'[{", ".join(map(str, token_indices))}]}}\n')


def read_jsonl(path: str | Path) -> list[Event]:
    """Read events written by :func:`write_jsonl`; blank lines are skipped."""
    return list(iter_jsonl(path))


def iter_jsonl(path: str | Path) -> Iterator[Event]:
    """The events of a JSONL file one at a time, in file order, without
    holding the file or the list (a long run's events.jsonl is larger than
    its report needs). Consecutive equal times share one float object, so a
    reader that keeps every token's time keeps one object per cut."""
    last_time: Any = None
    for number, record in json_objects(path, EventLogError):
        last_time = share_time(record, last_time)
        if record.get("kind") == TOKENS_LINE_KIND:
            yield from token_events_at(path, number, record)
        else:
            yield event_at(path, number, record)


def share_time(record: dict[str, Any], last_time: Any) -> Any:
    """Give ``record`` the previous line's time object when its time is the
    same (not -0.0); returns the time object the next line may share."""
    time_s = record.get("time_s")
    if type(time_s) is type(last_time) and time_s == last_time and time_s:
        record["time_s"] = last_time
        return last_time
    return time_s


def event_at(path: str | Path, number: int, record: Mapping[str, Any]) -> Event:
    """:func:`event_from_dict` of line ``number`` of ``path``; its error names the line."""
    try:
        return event_from_dict(record)
    except EventLogError as error:
        raise EventLogError(f"{path}:{number}: {error}") from None


def token_run_at(path: str | Path, number: int, record: Mapping[str, Any]
                 ) -> tuple[Any, list[Any], list[Any]]:
    """The time, request ids and token indices of ``tokens`` line ``number``
    of ``path``, its shape checked (exactly its four fields, two lists of one
    length >= 1); the entries are checked by the token events they make."""
    fields = set(record)
    if fields != _TOKENS_FIELDS:
        raise EventLogError(f"{path}:{number}: tokens: bad fields {sorted(fields)}: expected "
                            f"{sorted(_TOKENS_FIELDS)}")
    request_ids, indices = record["request_ids"], record["token_indices"]
    if type(request_ids) is not list or type(indices) is not list:
        raise EventLogError(f"{path}:{number}: tokens: request_ids and token_indices must be "
                            f"lists, got {type(request_ids).__name__} and "
                            f"{type(indices).__name__}")
    if not request_ids or len(request_ids) != len(indices):
        raise EventLogError(f"{path}:{number}: tokens: request_ids and token_indices must have "
                            f"one length >= 1, got {len(request_ids)} and {len(indices)}")
    return record["time_s"], request_ids, indices


def token_events_at(path: str | Path, number: int, record: Mapping[str, Any]
                    ) -> list[TokenEvent]:
    """The token events of ``tokens`` line ``number`` of ``path``, in order;
    an error names the line and the entry (counted from 0)."""
    time_s, request_ids, indices = token_run_at(path, number, record)
    events = []
    for entry, (request_id, token_index) in enumerate(zip(request_ids, indices, strict=True)):
        try:
            events.append(TokenEvent(time_s, request_id, token_index=token_index))
        except EventLogError as error:
            raise EventLogError(f"{path}:{number}: tokens entry {entry}: {error}") from None
    return events


def _require_text(kind: str, name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise EventLogError(f"{kind}: {name} must be a non-empty str, got {value!r}")


def _require_count(kind: str, name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise EventLogError(f"{kind}: {name} must be an int >= 0, got {value!r}")
