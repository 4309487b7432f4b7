"""IterationResult: facts returned by execution (0x01A).

Only these facts advance frontiers. A planned interval that is missing from
``completed`` did not happen: it advances nothing and earns no service.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from iterserve.records.columns import FieldColumns
from iterserve.records.receipts import PreservationResult, ReleaseResult
from iterserve.records.state import CapacityFacts
from iterserve.records.view import FinishReason


class CompletedInterval(NamedTuple):
    """One planned interval that completed (a NamedTuple for hot-path speed).

    ``emitted`` is True when this interval produced an output token: a decode
    row, or a prefill chunk reaching the prompt frontier. ``token_id`` is the
    emitted token (synthetic in the simulator). ``finish_reason`` is set when
    the executor observed a stop on this emission.
    """

    request_id: str
    generation: int
    start: int
    end: int
    emitted: bool
    token_id: int | None = None
    finish_reason: FinishReason | None = None


class Completed(FieldColumns[CompletedInterval]):
    """A result's completed intervals, transposed into field columns once
    (:mod:`~iterserve.records.columns`)."""


@dataclass(frozen=True, slots=True)
class WorkFailure:
    request_id: str
    generation: int
    reason: str


@dataclass(frozen=True, slots=True)
class IterationResult:
    """What one iteration actually did.

    ``service`` is completed service per client in token rows, excluding
    rebuild rows (0x0C: rebuild earns no service). ``duration`` is on the
    run's clock (iterations or seconds). ``capacity`` is the memory owner's
    capacity facts after this iteration (None: unchanged). ``receipts`` are
    the memory owner's preservation receipts (0x0C): a READY one for each
    preserve intent it completed now, an INFLIGHT one for each it completes
    later, and the later READY (or FAILED) one in that iteration's result.
    ``releases`` are its release receipts (0x0C): one per intent that
    releases device blocks (a recompute, an abort, a reject, a preservation
    that swapped them out or failed), bound to the binding the intent
    opened. A recompute victim leaves PREEMPT_PENDING, and its blocks count
    as free capacity, only with a current READY release.
    """

    decision_id: int
    input_state_version: int
    completed: tuple[CompletedInterval, ...]
    failures: tuple[WorkFailure, ...] = ()
    service: Mapping[str, int] = field(default_factory=dict)
    duration: float = 1.0  # run clock units (records/__init__: Time)
    capacity: CapacityFacts | None = None
    receipts: tuple[PreservationResult, ...] = ()
    releases: tuple[ReleaseResult, ...] = ()
