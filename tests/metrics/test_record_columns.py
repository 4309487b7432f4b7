"""RecordColumns: a per-iteration series held as one array per field reads
back the records appended, with their values and types (issue 15)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iterserve.metrics import run_summary
from iterserve.metrics.capacity import (
    IterationComposition,
    batched_tokens_utilisation,
    sequence_slot_occupancy,
)
from iterserve.metrics.columns import RecordColumns, field_values
from iterserve.metrics.series import ResourceSample


def _records() -> list[IterationComposition]:
    return [IterationComposition(0.008 * i, 3 * i, i, i % 2, num_sequences=i + 1)
            for i in range(7)]


def test_records_read_back_equal_and_typed() -> None:
    series = RecordColumns(IterationComposition, "dqqqq")
    assert not series and len(series) == 0
    for record in _records():
        series.append(record)
    assert list(series) == _records() and series == _records()
    assert series[3] == _records()[3] and series[-1] == _records()[-1]
    assert series[2:5] == _records()[2:5]
    assert all(type(a.time_s) is float and type(a.num_sequences) is int for a in series)
    assert [r.num_rows for r in series] == [r.num_rows for r in _records()]
    other = RecordColumns(IterationComposition, "dqqqq")
    for record in _records()[:-1]:
        other.append(record)
    assert other != series
    other.append(_records()[-1])
    assert other == series


def test_a_value_of_another_type_is_refused() -> None:
    series = RecordColumns(IterationComposition, "dqqqq")
    with pytest.raises(TypeError, match="num_sequences=None"):
        series.append(IterationComposition(1.0, 1, 1))  # None would read back as a number
    with pytest.raises(TypeError, match="time_s=2"):
        series.append(IterationComposition(2, 1, 1, num_sequences=1))  # an int would turn float
    assert len(series) == 0  # a refused record leaves nothing behind


def test_typecodes_must_fit_the_fields() -> None:
    with pytest.raises(ValueError, match="per field"):
        RecordColumns(ResourceSample, "dqq")
    with pytest.raises(ValueError, match="per field"):
        RecordColumns(ResourceSample, "dqqqqf")
    samples = RecordColumns(ResourceSample, "dqqqqq")
    samples.append(ResourceSample(0.5, 4, 2, 10, 100, num_suspended=1))
    assert samples[0].kv_usage_fraction == 0.1


COUNTS = st.integers(min_value=0, max_value=50)
COMPOSITIONS = st.lists(st.builds(IterationComposition, st.floats(0, 1e6), COUNTS, COUNTS,
                                  COUNTS, st.integers(min_value=1, max_value=64)), max_size=30)
SAMPLES = st.lists(st.tuples(st.floats(0, 1e6), COUNTS, COUNTS, COUNTS, COUNTS).map(
    lambda t: ResourceSample(t[0], t[1] + t[2], t[3], min(t[2], t[4]), t[4], num_suspended=t[2])),
    max_size=30)


@settings(max_examples=150, deadline=None)
@given(COMPOSITIONS, SAMPLES)
def test_the_run_figures_read_from_columns_equal_those_read_from_records(
        compositions, samples) -> None:
    """The budget uses and the KV use read a RecordColumns' columns (no
    record made) and a list's records to the same values (the KV use's
    mean in the same float order); a series whose records do not all count
    their sequences has no slot occupancy."""
    iterations = RecordColumns(IterationComposition, "dqqqq")
    resources = RecordColumns(ResourceSample, "dqqqqq")
    for record in compositions:
        iterations.append(record)
    for sample in samples:
        resources.append(sample)
    assert list(field_values(iterations, "num_decode_rows")) == field_values(
        compositions, "num_decode_rows")
    assert batched_tokens_utilisation(iterations, 64) == batched_tokens_utilisation(compositions, 64)
    assert (sequence_slot_occupancy(iterations, 64)
            == sequence_slot_occupancy(compositions, 64))
    assert run_summary._kv_use(resources) == run_summary._kv_use(samples)
    expected = sum(record.num_rows for record in compositions)
    assert batched_tokens_utilisation(iterations, 64).num_used == expected
    bounded = [sample for sample in samples if sample.num_kv_blocks_total > 0]
    kv = run_summary._kv_use(resources)
    assert (kv is None) is not bounded
    if kv is not None:
        assert kv.num_blocks_total == max(s.num_kv_blocks_total for s in bounded)
        assert kv.peak_num_blocks_used == max(s.num_kv_blocks_used for s in bounded)
    uncounted = [*compositions, IterationComposition(1.0, 1, 1)]  # num_sequences None
    assert sequence_slot_occupancy(uncounted, 64) is None
