"""Least-squares fit of an iteration-time model to measured iterations.

Least squares on *relative* residuals ((predicted - measured) / measured,
i.e. rows weighted by 1 / measured): a decode iteration of 3 ms matters as
much as a 500-row prefill of 100 ms, and a light load is mostly the former.
Only gross stalls (residual beyond 10 median absolute
deviations, a process descheduled for a long time) are dropped before a
second fit. The error is
reported on held-out points (every ``holdout_every``-th sample, in measured
order), never on the points the fit saw.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from iterserve.cost.profiled import FEATURES, CostProfile, FitError, feature_values
from iterserve.cost.protocol import BatchShape, CostModelError

_MAD_CUTOFF = 10.0


def _design(shapes: Sequence[BatchShape]) -> np.ndarray:
    rows = [(1.0, *feature_values(shape)) for shape in shapes]
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


def fit_profile(samples: Sequence[tuple[BatchShape, float]],
                provenance: tuple[tuple[str, str], ...], holdout_every: int = 5) -> CostProfile:
    """Fit ``samples`` (shape, measured ms) and measure the held-out error."""
    if holdout_every < 2:
        raise CostModelError("holdout_every must be >= 2")
    heldout = [s for i, s in enumerate(samples) if i % holdout_every == holdout_every - 1]
    train = [s for i, s in enumerate(samples) if i % holdout_every != holdout_every - 1]
    if len(train) <= len(FEATURES) + 1 or not heldout:
        raise CostModelError(f"too few measured iterations to fit: {len(samples)}")
    measured = np.asarray([ms for _, ms in train], dtype=np.float64)
    if measured.min() <= 0:
        raise CostModelError("a measured iteration lasted no time; cannot fit")
    solution = _robust_solve(_design([shape for shape, _ in train]), measured)
    floor_ms = float(measured.min())
    profile = CostProfile(float(solution[0]), tuple(float(c) for c in solution[1:]), floor_ms,
                          provenance, FitError(len(train), len(heldout), 0.0, 0.0))
    errors = [abs(profile.predict_ms(shape) - ms) / ms for shape, ms in heldout]
    fit = FitError(len(train), len(heldout), float(np.mean(errors)), float(np.max(errors)))
    return CostProfile(profile.intercept_ms, profile.coefficients_ms, floor_ms, provenance, fit)


def speed_factor(profile: CostProfile, samples: Sequence[tuple[BatchShape, float]]) -> float:
    """Total measured / total predicted time over ``samples``: how much slower
    (> 1) or faster the machine ran while they were measured than the profile
    says. A ratio of totals, not a median: latencies are means over time, so
    the descheduled stretches a median would drop belong in the factor."""
    if not samples:
        raise CostModelError("no samples to compare with the profile")
    measured_ms = sum(ms for _, ms in samples)
    return measured_ms / sum(profile.predict_ms(shape) for shape, _ in samples)
