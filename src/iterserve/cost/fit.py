"""Least-squares fit of an iteration-time model to measured iterations.

Least squares on *relative* residuals ((predicted - measured) / measured,
i.e. rows weighted by 1 / measured): a decode iteration of 3 ms matters as
much as a 500-row prefill of 100 ms, and a light load is mostly the former.
Only gross stalls (residual beyond 10 median absolute
deviations, a process descheduled for a long time) are dropped before a
second fit. The error is
reported on held-out points (every ``holdout_every``-th sample, in measured
order), never on the points the fit saw.

Carry-over. The executor times an iteration from the end of the one before
it, so an iteration's measured duration holds its predecessor's aftermath
(validating and applying that result, the observers, the caches a large
prefill evicted): measured, a decode iteration right after a prefill runs
10-30 % longer than one after a decode. Samples that name their predecessor
(:class:`MeasuredIteration`) fit that aftermath as extra terms in the
predecessor's ``CARRIED`` features, and the profile adds them back to the
iteration that causes them: the simulator then prices each iteration with
all the work it causes, and a run of small decodes (rarely after a prefill)
is not priced at the grid's mix. The held-out error is the fitted model's
(own shape plus its predecessor's carry) on the measured durations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from iterserve.cost.profiled import FEATURES, CostProfile, FitError, feature_values
from iterserve.cost.protocol import BatchShape, CostModelError

_MAD_CUTOFF = 10.0
CARRIED = ("num_prefill_rows", "num_sequences")  # what an iteration leaves to the next
_CARRIED_INDEX = tuple(FEATURES.index(name) for name in CARRIED)


class MeasuredIteration(NamedTuple):
    """One executed iteration: its shape, its measured duration (ms) and the
    shape of the iteration timed just before it in the same run (None for a
    run's first, which is timed from its own start)."""

    shape: BatchShape
    duration_ms: float
    previous: BatchShape | None = None


Sample = tuple[BatchShape, float] | MeasuredIteration


def _previous(sample: Sample) -> BatchShape | None:
    return sample.previous if isinstance(sample, MeasuredIteration) else None


def _carried(shape: BatchShape | None) -> tuple[float, ...]:
    if shape is None:
        return (0.0,) * len(CARRIED)
    values = feature_values(shape)
    return tuple(values[index] for index in _CARRIED_INDEX)


def _design(samples: Sequence[Sample]) -> np.ndarray:
    rows = [(1.0, *feature_values(s[0]), *_carried(_previous(s))) for s in samples]
    return np.asarray(rows, dtype=np.float64)


def _solve(design: np.ndarray, measured_ms: np.ndarray) -> np.ndarray:
    weights = 1.0 / measured_ms
    solution, *_ = np.linalg.lstsq(design * weights[:, None], measured_ms * weights, rcond=None)
    return np.asarray(solution)


def _robust_solve(design: np.ndarray, measured_ms: np.ndarray) -> np.ndarray:
    coefficients = _solve(design, measured_ms)
    residuals = (measured_ms - design @ coefficients) / measured_ms
    mad = float(np.median(np.abs(residuals - np.median(residuals))))
    keep = np.abs(residuals) <= _MAD_CUTOFF * max(mad, 1e-9)
    if keep.sum() > design.shape[1]:
        coefficients = _solve(design[keep], measured_ms[keep])
    return coefficients


def _own_with_carry(solution: np.ndarray) -> tuple[float, ...]:
    """The fitted feature coefficients, each carried one added to its own."""
    own = [float(c) for c in solution[1:1 + len(FEATURES)]]
    for index, carry in zip(_CARRIED_INDEX, solution[1 + len(FEATURES):], strict=True):
        own[index] += float(carry)
    return tuple(own)


def fit_profile(samples: Sequence[Sample], provenance: tuple[tuple[str, str], ...],
                holdout_every: int = 5) -> CostProfile:
    """Fit ``samples`` (shape, measured ms[, predecessor]) and measure the
    held-out error."""
    if holdout_every < 2:
        raise CostModelError("holdout_every must be >= 2")
    heldout = [s for i, s in enumerate(samples) if i % holdout_every == holdout_every - 1]
    train = [s for i, s in enumerate(samples) if i % holdout_every != holdout_every - 1]
    if len(train) <= len(FEATURES) + len(CARRIED) + 1 or not heldout:
        raise CostModelError(f"too few measured iterations to fit: {len(samples)}")
    measured = np.asarray([s[1] for s in train], dtype=np.float64)
    if measured.min() <= 0:
        raise CostModelError("a measured iteration lasted no time; cannot fit")
    solution = _robust_solve(_design(train), measured)
    floor_ms = float(measured.min())
    held_ms = np.asarray([s[1] for s in heldout], dtype=np.float64)
    predicted_ms = np.maximum(floor_ms, _design(heldout) @ solution)
    errors = np.abs(predicted_ms - held_ms) / held_ms
    fit = FitError(len(train), len(heldout), float(np.mean(errors)), float(np.max(errors)))
    return CostProfile(float(solution[0]), _own_with_carry(solution), floor_ms, provenance, fit)


def speed_factor(profile: CostProfile, samples: Sequence[Sample]) -> float:
    """Total measured / total predicted time over ``samples``: how much slower
    (> 1) or faster the machine ran while they were measured than the profile
    says. A ratio of totals, not a median: latencies are means over time, so
    the descheduled stretches a median would drop belong in the factor."""
    if not samples:
        raise CostModelError("no samples to compare with the profile")
    measured_ms = sum(s[1] for s in samples)
    return measured_ms / sum(profile.predict_ms(s[0]) for s in samples)
