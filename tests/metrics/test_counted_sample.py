"""A counted sample (distinct values and counts) reads as the ascending
array it stands for: the same summary (mean, gated nearest-rank
percentiles), the same CDF vertices, the same elements (issue 15: the run
summary's TBT gaps, one per token, few distinct)."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from iterserve.metrics import counted_sample, plots
from iterserve.metrics.counted_sample import count_values
from iterserve.metrics.percentiles import summarize


def _gaps(seed: int, n: int) -> list[np.ndarray]:
    """Per-request gap arrays with many repeats (sums of a few durations)."""
    rng = np.random.default_rng(seed)
    durations = rng.choice([0.0084, 0.0121, 0.0333, 0.1 + 0.2], (n, 3))
    sizes = rng.integers(0, 9, n // 3)
    flat = durations.sum(axis=1)
    return np.split(flat, np.cumsum(sizes)[np.cumsum(sizes) < n])


@pytest.mark.parametrize("pending", [1, 5, 1 << 16])
@pytest.mark.parametrize("seed,n", [(1, 0), (2, 1), (3, 19), (4, 20), (5, 99), (6, 100), (7, 3000)])
def test_a_counted_sample_summarizes_as_its_array(monkeypatch, pending, seed, n) -> None:
    monkeypatch.setattr(counted_sample, "MAX_PENDING_VALUES", pending)
    parts = _gaps(seed, n)
    whole = np.sort(np.concatenate([np.empty(0), *parts]))
    counted = count_values(iter(parts))
    assert len(counted) == len(whole)
    assert np.asarray(counted).tolist() == whole.tolist()
    assert [counted[k] for k in range(len(whole))] == whole.tolist()
    assert summarize(counted) == summarize(whole)
    assert summarize(counted).to_dict(scale=1000.0) == summarize(whole).to_dict(scale=1000.0)
    assert len(counted.values) == len(np.unique(whole)) and (np.diff(counted.values) > 0).all()
    with pytest.raises(IndexError):
        counted[len(whole)]


def test_a_counted_sample_refuses_non_finite_values() -> None:
    with pytest.raises(ValueError, match="finite"):
        summarize(count_values([np.array([1.0, np.inf])]))


@pytest.mark.parametrize("scale", [1000.0, 1 / 0.008, 3.0])
@pytest.mark.parametrize("max_vertices", [10, 10**9])
def test_a_counted_cdf_draws_the_vertices_of_its_array(monkeypatch, scale, max_vertices) -> None:
    monkeypatch.setattr(plots, "MAX_STEP_VERTICES", max_vertices)
    parts = _gaps(8, 500)
    whole = np.sort(np.concatenate(parts))

    def vertices(values):
        figure = Figure()
        FigureCanvasAgg(figure)
        axis = figure.subplots()
        plots._step_cdf(axis, values, "x", scale=scale)
        x, y = axis.lines[0].get_data()
        return np.asarray(x).tolist(), np.asarray(y).tolist()

    assert vertices(count_values(parts)) == vertices(whole)
