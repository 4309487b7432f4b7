"""0x04: the packed record binds every row to its plan item: request key,
phase and the decision / state / snapshot versions (``request_key_by_row``,
``phase_by_row``). The expectations are the spec's five-row fixture, by hand:
q = [1, 3, 1], offsets [0, 1, 4, 5], rows A:0 B:0 B:0 B:0 C:0."""

from __future__ import annotations

import pytest

from iterserve.model.packing import SegmentSpec, bind_rows, pack
from iterserve.records.frontier import WorkKind
from iterserve.records.plan import IterationPlan, make_work

DECODE, PREFILL = WorkKind.DECODE_ROW, WorkKind.PREFILL_CHUNK
A = make_work("A", 0, 7, 5, 6, DECODE)
B = make_work("B", 0, 3, 0, 3, PREFILL)
C = make_work("C", 0, 9, 2, 3, DECODE)
PLAN = IterationPlan(12, 40, "fixture", "1", (A, B, C), 5, 3)
SEGMENTS = [SegmentSpec([15], 5, [0, 1], True), SegmentSpec([20, 21, 22], 0, [2], False),
            SegmentSpec([32], 2, [3], True)]


def test_every_packed_row_names_its_request_phase_and_versions() -> None:
    batch = pack(SEGMENTS, 4, binding=bind_rows(PLAN, [A, B, C], SEGMENTS))
    binding = batch.binding
    assert binding is not None
    assert binding.request_offsets == (0, 1, 4, 5) == tuple(batch.request_offsets.tolist())
    assert binding.request_key_by_row == (("A", 0), ("B", 0), ("B", 0), ("B", 0), ("C", 0))
    assert binding.phase_by_row == (DECODE, PREFILL, PREFILL, PREFILL, DECODE)
    assert (binding.decision_id, binding.input_state_version) == (12, 40)
    assert binding.snapshot_versions == (7, 3, 9)
    assert batch.positions.tolist() == [5, 0, 1, 2, 2]


def test_a_segment_past_a_cached_prefix_binds_only_its_computed_rows() -> None:
    """B's interval is [0, 3) but rows [0, 2) are cached: one row is packed."""
    segments = [SEGMENTS[0], SegmentSpec([22], 2, [2], False), SEGMENTS[2]]
    binding = bind_rows(PLAN, [A, B, C], segments)
    assert binding.request_offsets == (0, 1, 2, 3)
    assert binding.request_key_by_row == (("A", 0), ("B", 0), ("C", 0))


def test_a_binding_that_changes_an_interval_or_names_no_plan_item_is_refused() -> None:
    moved = [SEGMENTS[0], SegmentSpec([20, 21, 22], 1, [2], False), SEGMENTS[2]]
    with pytest.raises(ValueError, match=r"outside the interval \[0, 3\) of B"):
        bind_rows(PLAN, [A, B, C], moved)
    stranger = make_work("D", 0, 1, 5, 6, DECODE)
    with pytest.raises(ValueError, match="D is not an item of the plan"):
        bind_rows(PLAN, [stranger, B, C], SEGMENTS)
    other = bind_rows(PLAN, [B, A, C], [SEGMENTS[1], SEGMENTS[0], SEGMENTS[2]])
    with pytest.raises(ValueError, match="binding offsets"):
        pack(SEGMENTS, 4, binding=other)  # its rows are not this packing's
