"""The one preemption vocabulary (0x0C).

:class:`PreemptionMode` is the only spelling of how a preempted request's
K/V is handled: ``recompute`` or ``swap`` (vLLM's words; ``swap`` is the
spec's exact preservation, PRESERVE_EXACT, here through the host swap
pool). Its values are the workload file's and the flags' spellings
(``kv.preemption_mode``); the older file spelling ``preserve`` is read as
``swap`` with a deprecation warning. The plan's queue intents carry the
spec's record names (``PREEMPT_RECOMPUTE``, ``PREEMPT_PRESERVE_EXACT``)
through :func:`iterserve.records.plan.preempt_intent_kind`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from iterserve.records.vocabulary import warn_renamed

#: the older spelling of ``swap`` in workload files
DEPRECATED_SWAP_NAME = "preserve"


class PreemptionMode(enum.Enum):
    RECOMPUTE = "recompute"  # drop K/V, rebuild [T_ready, T_target) from token history
    SWAP = "swap"  # keep exact K/V in the host swap pool, restore on resume (PRESERVE_EXACT)
    ABORT = "abort"  # end the request
    # per victim, whichever of C_recompute and C_preserve is lower (0x0C)
    CHEAPER = "cheaper"

    __hash__ = object.__hash__


class FallbackMode(enum.Enum):
    """What a failed preservation falls back to (0x0C's fallback matrix):
    ``recompute`` rebuilds [0, T_target) from the immutable token history,
    back at the front of waiting; ``remain_suspended`` keeps the request
    suspended without K/V (no resume ticket until the resume pass brings it
    back, then it rebuilds [0, T_target)); ``abort`` ends it. Marking the
    failed receipt ready, or reusing an earlier epoch's, is never an option.
    The workload's ``kv.preservation_fallback`` names the run's."""

    RECOMPUTE = "recompute"
    REMAIN_SUSPENDED = "remain_suspended"
    ABORT = "abort"

    __hash__ = object.__hash__


FALLBACK_NAMES: tuple[str, ...] = tuple(mode.value for mode in FallbackMode)


#: the modes a preemption carries out (metrics and reports count by these)
KV_PREEMPTION_MODES: tuple[PreemptionMode, ...] = (PreemptionMode.RECOMPUTE,
                                                    PreemptionMode.SWAP)
#: the modes a workload's ``kv.preemption_mode`` may name: those, or the cheaper per victim
KV_RUN_PREEMPTION_MODES: tuple[PreemptionMode, ...] = (*KV_PREEMPTION_MODES,
                                                       PreemptionMode.CHEAPER)
KV_PREEMPTION_MODE_NAMES: tuple[str, ...] = tuple(mode.value for mode in KV_RUN_PREEMPTION_MODES)


def parse_kv_preemption_mode(value: str | PreemptionMode) -> PreemptionMode:
    """The KV spec's mode from its workload spelling; raises naming the field."""
    if isinstance(value, PreemptionMode) and value in KV_RUN_PREEMPTION_MODES:
        return value
    if isinstance(value, str) and value in KV_PREEMPTION_MODE_NAMES:
        return PreemptionMode(value)
    if value == DEPRECATED_SWAP_NAME:
        warn_renamed("kv.preemption_mode 'preserve'", "'swap'")
        return PreemptionMode.SWAP
    raise ValueError(f"kv.preemption_mode must be one of {list(KV_PREEMPTION_MODE_NAMES)}")


@dataclass(frozen=True, slots=True)
class PreemptionCostSpec:
    """The inputs of 0x0C's two planning costs, for ``kv.preemption_mode:
    cheaper`` (the workload's ``kv.preemption_cost``)::

        C_recompute(r) ~= model_cost([T_ready, T_target)) + queue_overhead_ms
        C_preserve(r)  ~= bytes / write_bytes_per_s + bytes / read_bytes_per_s
                          + staging_overhead_ms

    ``recompute_cost_model`` is an iteration-cost model spec
    (:mod:`iterserve.cost`, e.g. ``linear:5,0.05,0.5``) pricing the rebuild
    as one prefill of its rows; the two link directions are apart (the
    symmetric ``2 * bytes / bandwidth`` is only a special case)."""

    recompute_cost_model: str
    write_bytes_per_s: float
    read_bytes_per_s: float
    staging_overhead_ms: float = 0.0
    queue_overhead_ms: float = 0.0

    def __post_init__(self) -> None:
        if not self.recompute_cost_model:
            raise ValueError("kv.preemption_cost.recompute_cost_model must name a cost model")
        if not (self.write_bytes_per_s > 0 and self.read_bytes_per_s > 0):
            raise ValueError("kv.preemption_cost: write_bytes_per_s and read_bytes_per_s "
                             "must be > 0")
        if self.staging_overhead_ms < 0 or self.queue_overhead_ms < 0:
            raise ValueError("kv.preemption_cost: overheads must be >= 0")


class PreemptionCause(enum.Enum):
    """Why a request was preempted, as a closed set for metric labels.

    A preempt intent's ``reason`` is free text for the decision log (it
    names the victim's queue position and arrival, 0x0C); its cause is the
    word it starts with. A reason that starts with none of them is
    ``OTHER``, so no reason text ever becomes a label value."""

    KV_EXHAUSTED = "kv_exhausted"  # the KV ledger could not fit a running request's rows
    STARVATION_GUARD = "starvation_guard"  # the guard made room for an unserved client
    # a request waited the run's bound on a release in flight (0x06,
    # kv.extension_wait_max_iterations): its TEMPORARILY_UNAVAILABLE became FAILED
    EXTENSION_WAIT_BOUND = "extension_wait_bound"
    OTHER = "other"

    __hash__ = object.__hash__


def preemption_cause_of(reason: str) -> PreemptionCause:
    """The closed cause a preempt intent's free-text ``reason`` starts with."""
    for cause in (PreemptionCause.KV_EXHAUSTED, PreemptionCause.STARVATION_GUARD,
                  PreemptionCause.EXTENSION_WAIT_BOUND):
        if reason.startswith(cause.value):
            return cause
    return PreemptionCause.OTHER
