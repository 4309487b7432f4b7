"""RecordColumns: a per-iteration series held as one array per field reads
back the records appended, with their values and types (issue 15)."""

from __future__ import annotations

import pytest

from iterserve.metrics.capacity import IterationComposition
from iterserve.metrics.columns import RecordColumns
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
