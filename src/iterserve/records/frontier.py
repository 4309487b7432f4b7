"""The frontier rules (0x01A, 0x0C): the one home of the legal-interval rule.

With prompt length ``p``, emitted output tokens ``e`` and computed rows ``c``:

- the **target** is ``p`` while nothing is emitted, else ``p + e - 1`` (the
  row before the next decode row);
- **prefill** (``e == 0``) is ``[c, end)`` with ``c < end <= p``;
- **rebuild** after a recompute preemption (``e >= 1``, ``c < p + e - 1``) is
  ``[c, end)`` with ``end <= p + e - 1``: it emits nothing and earns no
  service (0x0C);
- **decode** (``e >= 1``, ``c == p + e - 1``) is exactly ``[c, c + 1)``;
- completing prefill at ``p`` emits output token 1, a decode row emits one
  token, rebuild and a partial prefill emit nothing;
- the **length stop**: the emission that makes ``e`` reach
  ``max_output_tokens`` finishes the request;
- **service** is the completed rows of every interval but a rebuild.

Everything else (views, the plan builder, validation, tie-break keys, the
executors and the result builder) calls these functions. They take plain
ints so the hot path pays one call and no attribute reads; the named-error
checks at the bottom are the slow path validation falls back to.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import add, and_, eq, ge, is_, is_not, lt, or_, sub, truth

from iterserve.records import errors as E


class WorkKind(enum.Enum):
    """Derived annotation of a work interval (0x01A, 0x0C). Never forged."""

    PREFILL_CHUNK = "PREFILL_CHUNK"
    DECODE_ROW = "DECODE_ROW"
    REBUILD = "REBUILD"

    __hash__ = object.__hash__


PREFILL, DECODE, REBUILD = WorkKind.PREFILL_CHUNK, WorkKind.DECODE_ROW, WorkKind.REBUILD

#: Decode-first phase order of the tie-break key ``phase_rank``.
PHASE_RANK: dict[WorkKind, int] = {DECODE: 0, REBUILD: 1, PREFILL: 2}

_NO_INTERVAL: tuple[int, WorkKind | None] = (0, None)
_UNBOUNDED = sys.maxsize


def target(p: int, e: int) -> int:
    """The computed frontier to reach before the next decode row."""
    return p if e == 0 else p + e - 1


def frozen_target(p: int, e: int, c: int) -> int:
    """T_target a preemption freezes (0x0C): p + e - 1 once an output
    exists, else the prompt rows computed so far (a prompt cut mid-prefill)."""
    return c if e == 0 else p + e - 1


def next_kind(p: int, e: int, c: int) -> WorkKind:
    """The phase of the next interval: prefill while nothing is emitted,
    decode at the target, rebuild anywhere else (below it, in any reachable
    state; :func:`next_interval` refuses the rest)."""
    if e == 0:
        return PREFILL
    return DECODE if c == p + e - 1 else REBUILD


def decode_steps(p: Iterable[int], e: Iterable[int], c: Iterable[int]) -> list[bool]:
    """Whether :func:`next_kind` of each ``(p[i], e[i], c[i])`` is DECODE
    (``e >= 1`` and ``c == p + e - 1``), with no Python-level call per
    request (the plan builder's running pass)."""
    return list(map(and_, map(truth, e), map(eq, c, map(sub, map(add, p, e), repeat(1)))))


def num_decode_rows_done(e: int) -> int:
    """Decode rows a request with ``e`` outputs has completed: prefill
    emits output 1, each later output is one decode row."""
    return e - 1 if e > 1 else 0


def rows_held_after_outputs(p: int, e: int) -> int:
    """K/V rows a request holds once ``e >= 1`` outputs are emitted: the
    target, because the newest output's row is computed by the next decode."""
    return target(p, max(e, 1))


def rows_of_sequence_left(p: int, e: int, c: int) -> int:
    """Rows of the whole sequence so far not yet computed: ``p + e - c``
    (vLLM's ``num_tokens - num_computed_tokens``)."""
    return rows_through_next_emission(p, e) - c


def interval_emits(p: int, e: int, start: int, end: int) -> bool:
    """Whether completing the legal interval ``[start, end)`` emits."""
    return emits(next_kind(p, e, start), p, end)


def interval_earns_service(p: int, e: int, start: int) -> bool:
    """Whether the legal interval starting at ``start`` earns service (not a rebuild)."""
    return earns_service(next_kind(p, e, start))


def plain_decode_tokens(nums_emitted_before: Iterable[int], emitted: Iterable[bool],
                        finish_reasons: Iterable[object]) -> Iterable[bool]:
    """For each completion: whether it is a plain decode token, an emission
    after output 1 that finishes nothing (prefill runs only while nothing is
    emitted and rebuild emits nothing, so it is a decode row); lazily, with
    no Python-level call per row (the event stream's hot path)."""
    return map(and_, map(and_, map(truth, nums_emitted_before), emitted),
               map(is_, finish_reasons, repeat(None)))


def rows_to_target(p: int, e: int, c: int) -> int:
    """Rows to compute before a decode row is next (0 when decoding)."""
    return target(p, e) - c


def next_interval(p: int, e: int, c: int, max_rows: int) -> tuple[int, WorkKind | None]:
    """``(rows, kind)`` of the widest legal interval ``[c, c + rows)`` of at
    most ``max_rows`` rows, or ``(0, None)`` when there is none (the plan
    builder's hot path)."""
    if e == 0:
        rows, kind = p - c, PREFILL
    else:
        rows = p + e - 1 - c
        if rows > 0:
            kind = REBUILD
        elif rows == 0:
            rows, kind = 1, DECODE
        else:
            return _NO_INTERVAL
    if rows > max_rows:
        rows = max_rows
    return (rows, kind) if rows > 0 else _NO_INTERVAL


def legal_rows(p: int, e: int, c: int) -> int:
    """Width of the widest legal interval now (1 when decoding)."""
    return next_interval(p, e, c, _UNBOUNDED)[0]


def interval_kind(p: int, e: int, c: int, start: int, end: int) -> WorkKind | None:
    """The kind of ``[start, end)`` when it is legal, else None (the
    validator's hot path: compare with the item's recorded kind). Written
    out rather than calling :func:`next_interval` (one call per item, not
    two); the tests pin that the two agree."""
    if start != c or end <= start:
        return None
    if e == 0:
        return PREFILL if end <= p else None
    t = p + e - 1
    if c < t:
        return REBUILD if end <= t else None
    return DECODE if c == t and end == c + 1 else None


def are_decode_rows(p: Sequence[int], e: Sequence[int], end: tuple[int, ...],
                    width: tuple[int, ...]) -> bool:
    """Whether every interval ``[end - width, end)`` that starts at its
    computed frontier ``c`` is the decode row of its frontiers (``e != 0``,
    one row, ``c == p + e - 1``): :func:`interval_kind` is DECODE for each.
    The batch form, for the validator's accept pass (C-level passes over
    whole columns); the tests pin that the two agree."""
    return all(e) and width.count(1) == len(width) and tuple(map(add, p, e)) == end


def rows_through_next_emission(p: int, e: int) -> int:
    """Rows the request holds once its next output is emitted: ``p`` before
    the first (prefill reaching ``p`` emits), ``p + e`` after."""
    return p + e


def emits(kind: WorkKind, p: int, end: int) -> bool:
    """Whether completing an interval of ``kind`` ending at ``end`` emits."""
    return kind is DECODE or (kind is PREFILL and end == p)


def is_length_stop(num_emitted: int, max_output_tokens: int) -> bool:
    """Whether ``num_emitted`` outputs (counting the new one) reach the limit."""
    return num_emitted >= max_output_tokens


def earns_service(kind: WorkKind) -> bool:
    """Rebuild rows earn no service (0x0C); every other completed row does."""
    return kind is not REBUILD


def service_rows(kind: WorkKind, start: int, end: int) -> int:
    """Service rows ``[start, end)`` of ``kind`` earn when completed."""
    return end - start if kind is not REBUILD else 0


def emits_rows(kinds: Sequence[WorkKind], ps: Iterable[int], ends: Iterable[int]) -> list[bool]:
    """:func:`emits` of each row ``(kinds[i], ps[i], ends[i])``, with no
    Python-level call per row (the result builder's whole-plan path)."""
    decode = list(map(is_, kinds, repeat(DECODE)))
    if all(decode):
        return decode
    return list(map(or_, decode, map(and_, map(is_, kinds, repeat(PREFILL)), map(eq, ends, ps))))


def all_decode_kinds(kinds: Iterable[WorkKind]) -> bool:
    """Whether every row is a decode row: each then emits one output and
    earns its one row of service (the common step's shortcut around
    :func:`emits_rows` and :func:`earns_service_rows`)."""
    return all(map(is_, kinds, repeat(DECODE)))


def earns_service_rows(kinds: Iterable[WorkKind]) -> list[bool]:
    """:func:`earns_service` of each row, with no Python-level call per row."""
    return list(map(is_not, kinds, repeat(REBUILD)))


def length_stop_rows(nums_emitted: Iterable[int], max_output_tokens: Iterable[int]) -> list[bool]:
    """:func:`is_length_stop` of each row, with no Python-level call per row."""
    return list(map(ge, nums_emitted, max_output_tokens))


def phase_rank(p: int, e: int, c: int) -> int:
    """Decode 0, rebuild 1, prefill 2 (the ``phase_rank`` tie-break field)."""
    return PHASE_RANK[next_kind(p, e, c)]


def completion_service(p: int, e: int, max_output_tokens: int, kind: WorkKind, start: int,
                       end: int, emitted: bool, has_finish: bool) -> int | None:
    """Service rows a completed ``[start, end)`` of ``kind`` earns (0 for a
    rebuild), or None when its output clock breaks the rule; then
    :func:`check_output_clock` names the error. The validator's hot path:
    :func:`emits`, :func:`is_length_stop` and :func:`service_rows` written
    out in one call; the tests pin that they agree."""
    if kind is DECODE or (kind is PREFILL and end == p):
        if emitted and (has_finish or e + 1 < max_output_tokens):
            return end - start
        return None
    if emitted or has_finish:
        return None
    return 0 if kind is REBUILD else end - start


def emit_without_stop(e: Sequence[int], max_output_tokens: Sequence[int],
                      emitted: Sequence[bool]) -> bool:
    """Whether decode rows that report no finish reason keep the output
    clock: each emitted, and its output ``e + 1`` stays below the length
    stop (:func:`completion_service` is not None for each). The batch form,
    for the validator's accept pass; the tests pin that the two agree."""
    return all(emitted) and all(map(lt, map(add, e, repeat(1)), max_output_tokens))


def check_interval(request_id: str, p: int, e: int, c: int, start: int, end: int,
                   kind: WorkKind) -> None:
    """Raise the named error of the first rule ``[start, end)`` of ``kind``
    breaks (the validator's slow path); return when it is legal."""
    if start != c:
        raise E.IntervalBeforeFrontier(
            f"{request_id}: interval starts at {start}, computed frontier is {c}"
        )
    if end <= start:
        raise E.EmptyInterval(f"{request_id}: [{start},{end}) is empty")
    derived = next_kind(p, e, c)
    if derived is DECODE:
        if end != c + 1:
            raise E.MultiRowDecode(f"{request_id}: decode must be [{c},{c + 1})")
    elif end > target(p, e):
        raise E.IntervalBeyondTarget(f"{request_id}: end {end} beyond target {target(p, e)}")
    if kind is not derived:
        raise E.ForgedKind(f"{request_id}: kind {kind.value}, derived {derived.value}")


def check_output_clock(request_id: str, p: int, e: int, max_output_tokens: int,
                       kind: WorkKind, end: int, emitted: bool, has_finish: bool) -> None:
    """Raise ``WrongOutputClock`` when a completion breaks the emission or
    length-stop rule: prefill emits token 1 only on reaching ``p``, decode
    emits one, rebuild none (0x01A, 0x0C)."""
    if emitted != emits(kind, p, end):
        raise E.WrongOutputClock(f"{request_id}: emitted={emitted} for {kind.value} ending at {end}")
    if has_finish and not emitted:
        raise E.WrongOutputClock(f"{request_id}: finish reason on an interval that emitted nothing")
    if emitted and not has_finish and is_length_stop(e + 1, max_output_tokens):
        raise E.WrongOutputClock(
            f"{request_id}: output {e + 1} reaches max_output_tokens without a length stop"
        )
