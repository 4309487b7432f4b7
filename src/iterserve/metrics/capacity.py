"""Capacity arithmetic and logical slot occupancy (0x02 F08-F11, 0x07 F40-F41).

Everything here counts *logical rows or slots*. Logical slot occupancy is a
scheduling abstraction: prefill and decode rows differ in shape, duration and
memory traffic, so occupancy is **not measured GPU utilization**, and every
label that shows it says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from iterserve.metrics.columns import field_values

SLOT_OCCUPANCY_LABEL = "logical slot occupancy (not measured GPU utilization)"
SEQUENCE_SLOT_OCCUPANCY_LABEL = (
    "logical slot occupancy: sequences per iteration / max_num_seqs "
    "(not measured GPU utilization)"
)
TOKEN_BUDGET_UTILISATION_LABEL = (
    "token-budget utilisation: token rows per iteration / max_num_batched_tokens "
    "(not measured GPU utilization)"
)
_ROW_FIELDS = ("num_prefill_rows", "num_decode_rows", "num_rebuild_rows")  # num_rows' terms
_TICK_ROUNDING = 1e-9  # 1.3 / 0.01 is 129.99999999999997 in floats; a tick count is exact


@dataclass(frozen=True, slots=True)
class IterationComposition:
    """Rows one executed iteration carried, by kind. Rebuild rows re-create
    preempted K/V, emit nothing and earn no service (0x0C)."""

    time_s: float
    num_prefill_rows: int
    num_decode_rows: int
    num_rebuild_rows: int = 0
    num_sequences: int | None = None  # distinct requests with work; None when not recorded

    def __post_init__(self) -> None:
        counts = (self.num_prefill_rows, self.num_decode_rows, self.num_rebuild_rows)
        if any(count < 0 for count in counts):
            raise ValueError(f"row counts must be >= 0, got {counts}")

    @property
    def num_rows(self) -> int:
        return self.num_prefill_rows + self.num_decode_rows + self.num_rebuild_rows


@dataclass(frozen=True, slots=True)
class SlotOccupancy:
    """F09-F11 over executed iterations: useful, available and idle slot work."""

    num_iterations: int
    num_useful_slot_iterations: int
    num_available_slot_iterations: int
    num_rebuild_slot_iterations: int
    occupancy: float | None
    label: str = SLOT_OCCUPANCY_LABEL

    @property
    def num_idle_slot_iterations(self) -> int:
        return self.num_available_slot_iterations - self.num_useful_slot_iterations

    def to_dict(self) -> dict[str, object]:
        return {
            "label": self.label,
            "num_iterations": self.num_iterations,
            "num_useful_slot_iterations": self.num_useful_slot_iterations,
            "num_available_slot_iterations": self.num_available_slot_iterations,
            "num_idle_slot_iterations": self.num_idle_slot_iterations,
            "num_rebuild_slot_iterations": self.num_rebuild_slot_iterations,
            "slot_occupancy_not_measured_gpu_utilization": self.occupancy,
        }


def slot_occupancy(
    iterations: Sequence[IterationComposition], num_slots_per_iteration: int
) -> SlotOccupancy:
    """U_slot = occupied slot-iterations / (slots * iterations) (F11)."""
    if num_slots_per_iteration < 1:
        raise ValueError("num_slots_per_iteration must be >= 1")
    overfull = [item for item in iterations if item.num_rows > num_slots_per_iteration]
    if overfull:
        raise ValueError(f"iteration exceeds {num_slots_per_iteration} slots: {overfull[0]}")
    useful = sum(item.num_rows for item in iterations)
    available = num_slots_per_iteration * len(iterations)
    return SlotOccupancy(
        num_iterations=len(iterations),
        num_useful_slot_iterations=useful,
        num_available_slot_iterations=available,
        num_rebuild_slot_iterations=sum(item.num_rebuild_rows for item in iterations),
        occupancy=useful / available if available else None,
    )


@dataclass(frozen=True, slots=True)
class BudgetUse:
    """A used / available ratio over executed iterations with the name of
    what it counts: sequences against max_num_seqs (logical slot
    occupancy) or token rows against max_num_batched_tokens (token-budget
    utilisation). The two are different figures and never share a name."""

    label: str
    num_used: int
    num_available: int

    @property
    def fraction(self) -> float | None:
        return self.num_used / self.num_available if self.num_available else None

    def to_dict(self) -> dict[str, object]:
        return {"label": self.label, "num_used": self.num_used,
                "num_available": self.num_available, "fraction": self.fraction}


def batched_tokens_utilisation(
    iterations: Sequence[IterationComposition], max_num_batched_tokens: int
) -> BudgetUse:
    """Token rows carried / (max_num_batched_tokens x iterations)."""
    if max_num_batched_tokens < 1:
        raise ValueError("max_num_batched_tokens must be >= 1")
    num_rows = sum(sum(field_values(iterations, name)) for name in _ROW_FIELDS)
    return BudgetUse(TOKEN_BUDGET_UTILISATION_LABEL, num_rows,
                     max_num_batched_tokens * len(iterations))


def sequence_slot_occupancy(
    iterations: Sequence[IterationComposition], max_num_seqs: int
) -> BudgetUse | None:
    """Sequences with work / (max_num_seqs x iterations); None when the
    iterations do not record their sequence counts."""
    if max_num_seqs < 1:
        raise ValueError("max_num_seqs must be >= 1")
    counts = field_values(iterations, "num_sequences")
    if any(count is None for count in counts):
        return None
    return BudgetUse(SEQUENCE_SLOT_OCCUPANCY_LABEL, sum(counts), max_num_seqs * len(iterations))


def num_window_iterations(window_s: float, iteration_s: float) -> int:
    """Whole iterations of ``iteration_s`` that fit in ``window_s``."""
    if window_s < 0 or iteration_s <= 0:
        raise ValueError("need window_s >= 0 and iteration_s > 0")
    return math.floor(window_s / iteration_s + _TICK_ROUNDING)


@dataclass(frozen=True, slots=True)
class OverloadLedger:
    """F41: if demand D_W exceeds capacity C_W, at least D_W - C_W rows must be
    rejected, delayed beyond W, or removed by another explicit action."""

    num_demand_rows: int
    num_capacity_rows: int

    @property
    def num_unavoidable_excess_rows(self) -> int:
        return max(0, self.num_demand_rows - self.num_capacity_rows)

    @property
    def is_overloaded(self) -> bool:
        return self.num_demand_rows > self.num_capacity_rows

    def to_dict(self) -> dict[str, object]:
        return {
            "num_demand_rows": self.num_demand_rows,
            "num_capacity_rows": self.num_capacity_rows,
            "num_unavoidable_excess_rows": self.num_unavoidable_excess_rows,
            "is_overloaded": self.is_overloaded,
        }


def window_overload(
    num_demand_rows: int, *, window_s: float, iteration_s: float, max_rows_per_iteration: int
) -> OverloadLedger:
    """Offline finite-window ledger. Demand may use realized lengths: this is
    evaluation, never an input to an online policy (DESIGN rule 5)."""
    capacity = num_window_iterations(window_s, iteration_s) * max_rows_per_iteration
    return OverloadLedger(num_demand_rows=num_demand_rows, num_capacity_rows=capacity)


def queue_backlog(
    arrival_rows: Iterable[int], capacity_rows: Iterable[int], initial_rows: int = 0
) -> tuple[int, ...]:
    """F40: Q_{k+1} = max(0, Q_k + A_k - C_k); returns Q_0 .. Q_K."""
    backlog = [initial_rows]
    for arrived, served in zip(arrival_rows, capacity_rows, strict=True):
        backlog.append(max(0, backlog[-1] + arrived - served))
    return tuple(backlog)
