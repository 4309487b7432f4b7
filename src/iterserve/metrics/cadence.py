"""Decode cadence under chunked prefill, and the imbalance-area proxy (0x09).

A worked schedule splits one prompt into declared chunks and runs each chunk
in a mixed slot beside a set of decode requests. The ledger checks the
schedule's legality (the chunks cover the prompt exactly, every selected
decode runs in every slot, each slot fits the token budget) and reports:

- whether each slot's declared service time fits the declared service gate;
- the causal pairs per chunk and the prior rows exposed to later chunks
  (the chunk ledger, F44-F47);
- cadence dilation: each slot's service time over the decode-only service
  time, i.e. how much longer a decode waits between outputs;
- the imbalance-area proxy over the slots' service times.

Service times are inputs, not derived from row counts. The proxy

    I = n * max_i t_i - sum_i t_i        (milliseconds)

is an accumulated idle-area proxy across n microbatches: NOT a pipeline
simulation, a bubble duration or a speedup prediction (0x09).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from iterserve.metrics.chunk_ledger import ledger_from_sizes


def imbalance_proxy_ms(service_ms: Sequence[float]) -> float:
    """I = n * max_i t_i - sum_i t_i over microbatch service times (ms)."""
    if not service_ms:
        raise ValueError("the imbalance proxy needs at least one service time")
    if any(t < 0 for t in service_ms):
        raise ValueError(f"service times must be >= 0 ms, got {list(service_ms)}")
    return len(service_ms) * max(service_ms) - sum(service_ms)


@dataclass(frozen=True, slots=True)
class CadenceSlot:
    """One mixed slot: a prefill chunk, the decodes beside it, its service time."""

    prefill_rows: int
    decode_ids: tuple[str, ...]
    service_ms: float


@dataclass(frozen=True, slots=True)
class CadenceSchedule:
    num_prompt_tokens: int
    decode_ids: tuple[str, ...]  # the selected decode requests
    max_num_batched_tokens: int
    decode_only_ms: float
    service_gate_ms: float
    slots: tuple[CadenceSlot, ...]


@dataclass(frozen=True, slots=True)
class CadenceLedger:
    rows_per_slot: tuple[int, ...]
    within_gate: tuple[bool, ...]
    causal_pairs: tuple[int, ...]
    total_pairs: int
    history_rows: int  # R_hist: prior rows re-exposed to later chunks
    dilation: tuple[float, ...]  # slot service / decode-only service
    imbalance_ms: float


def cadence_ledger(schedule: CadenceSchedule) -> CadenceLedger:
    """The ledger of a legal schedule; ValueError naming the first broken rule."""
    _check(schedule)
    slots = schedule.slots
    chunks = ledger_from_sizes([slot.prefill_rows for slot in slots])
    service = [slot.service_ms for slot in slots]
    return CadenceLedger(
        rows_per_slot=tuple(slot.prefill_rows + len(slot.decode_ids) for slot in slots),
        within_gate=tuple(t <= schedule.service_gate_ms for t in service),
        causal_pairs=chunks.causal_pairs,
        total_pairs=chunks.total_pairs,
        history_rows=chunks.history_rows,
        dilation=tuple(t / schedule.decode_only_ms for t in service),
        imbalance_ms=imbalance_proxy_ms(service),
    )


def _check(schedule: CadenceSchedule) -> None:
    if not schedule.slots:
        raise ValueError("a cadence schedule needs at least one slot")
    if schedule.decode_only_ms <= 0:
        raise ValueError(f"decode_only_ms must be > 0, got {schedule.decode_only_ms}")
    covered = sum(slot.prefill_rows for slot in schedule.slots)
    if covered != schedule.num_prompt_tokens:
        raise ValueError(f"chunk coverage: chunks sum to {covered}, the prompt has "
                         f"{schedule.num_prompt_tokens} tokens")
    selected = sorted(schedule.decode_ids)
    for index, slot in enumerate(schedule.slots):
        if sorted(slot.decode_ids) != selected:
            raise ValueError(f"decode membership: slot {index} runs {list(slot.decode_ids)}, "
                             f"the selected decodes are {selected}")
        rows = slot.prefill_rows + len(slot.decode_ids)
        if rows > schedule.max_num_batched_tokens:
            raise ValueError(f"token budget: slot {index} holds {rows} rows > "
                             f"{schedule.max_num_batched_tokens}")
