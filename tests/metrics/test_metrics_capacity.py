"""Capacity arithmetic (F40, F41) and logical slot occupancy (F08-F11, 0x02)."""

import pytest

from iterserve.metrics import IterationComposition, queue_backlog, slot_occupancy, window_overload


def _iterations(rows_per_iteration: list[int]) -> list[IterationComposition]:
    return [IterationComposition(float(i), rows, 0) for i, rows in enumerate(rows_per_iteration)]


def test_fixed_batch_replay_occupancy_matches_0x02() -> None:
    # A(2) + B(8) frozen for 8 iterations, then C(3) alone for 3: 13 useful of 22.
    fixed = _iterations([2, 2] + [1] * 6 + [1] * 3)
    occupancy = slot_occupancy(fixed, num_slots_per_iteration=2)
    assert (occupancy.num_useful_slot_iterations, occupancy.num_available_slot_iterations) == (
        13,
        22,
    )
    assert occupancy.num_idle_slot_iterations == 9
    assert occupancy.occupancy == pytest.approx(0.591, abs=5e-4)
    assert "not measured GPU utilization" in occupancy.label
    assert "slot_occupancy_not_measured_gpu_utilization" in occupancy.to_dict()


def test_refill_replay_occupancy_matches_0x02() -> None:
    refill = _iterations([2, 2, 2, 2, 2, 1, 1, 1])
    assert slot_occupancy(refill, 2).occupancy == pytest.approx(0.8125)


def test_overfull_iteration_raises() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        slot_occupancy(_iterations([3]), 2)


def test_queue_recurrence() -> None:
    assert queue_backlog([3, 3, 0, 0], [2, 2, 2, 2]) == (0, 1, 2, 0, 0)


def test_no_overload_when_demand_fits() -> None:
    ledger = window_overload(200, window_s=1.3, iteration_s=0.01, max_rows_per_iteration=2)
    assert not ledger.is_overloaded and ledger.num_unavoidable_excess_rows == 0
