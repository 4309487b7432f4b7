"""An ascending sample held as its distinct values and their counts.

A run has one TBT gap per output token (20 million at 100,000 requests) but
few distinct gaps: a gap is a sum of iteration durations, and a 10,000-request
run's 2 million gaps take about 6,000 values. The run summary keeps them as a
:class:`CountedSample` (16 bytes a distinct value) instead of one float64 per
gap. It reads as the ascending array it stands for: ``len`` is the number of
samples, ``sample[k]`` the (k+1)-th smallest, ``np.asarray`` the whole array;
its mean is the correctly rounded exact sum over n, :func:`math.fsum`'s.

Equal values are counted as one: ``-0.0`` and ``0.0`` are one value (a gap
``y_j - y_{j-1}`` is never ``-0.0``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

MAX_PENDING_VALUES = 1 << 16  # values gathered before they are counted (512 KiB)


@dataclass(frozen=True, slots=True, eq=False)
class CountedSample:
    """``values`` distinct and ascending; ``counts[i]`` >= 1 samples equal
    ``values[i]``."""

    values: NDArray[np.float64]
    counts: NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.counts.sum())

    def __getitem__(self, index: int) -> float:
        """The (index+1)-th smallest sample (0 <= index < len)."""
        if not 0 <= index < len(self):
            raise IndexError(f"sample index {index} out of range")
        position = np.searchsorted(np.cumsum(self.counts), index + 1, side="left")
        return float(self.values[position])

    def __array__(self, dtype: object = None, copy: object = None) -> NDArray[np.float64]:
        return np.repeat(self.values, self.counts)

    def mean(self) -> float | None:
        """The exact sum, correctly rounded (as :func:`math.fsum` rounds it), over n."""
        n = len(self)
        if not n:
            return None
        exact = sum((Fraction(value) * count for value, count
                     in zip(self.values.tolist(), self.counts.tolist(), strict=True)),
                    Fraction(0))
        return float(exact) / n


def count_values(parts: Iterable[NDArray[np.float64]]) -> CountedSample:
    """The values of ``parts`` counted, ``MAX_PENDING_VALUES`` at a time (a
    long run's gaps are never held together)."""
    values: NDArray[np.float64] = np.empty(0)
    counts: NDArray[np.int64] = np.empty(0, dtype=np.int64)
    pending: list[NDArray[np.float64]] = []
    num_pending = 0
    for part in parts:
        pending.append(np.asarray(part, dtype=np.float64))
        num_pending += len(pending[-1])
        if num_pending >= MAX_PENDING_VALUES:
            values, counts = _merge(values, counts, pending)
            pending, num_pending = [], 0
    if pending:
        values, counts = _merge(values, counts, pending)
    return CountedSample(values, counts)


def _merge(values: NDArray[np.float64], counts: NDArray[np.int64],
           pending: list[NDArray[np.float64]]) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    new_values, new_counts = np.unique(np.concatenate(pending), return_counts=True)
    merged, inverse = np.unique(np.concatenate([values, new_values]), return_inverse=True)
    totals = np.zeros(len(merged), dtype=np.int64)
    np.add.at(totals, inverse.ravel(), np.concatenate([counts, new_counts.astype(np.int64)]))
    return merged, totals
