"""Per-request latency clocks and deadlines (0x07, F30-F31).

Clock origins are factual and never restart:

- TTFT = first output - ORIGINAL arrival. Admission, retry, preemption and
  resume do not move the origin; resetting it would erase queueing delay.
- TBT gap j = output j - output j-1, for j >= 1. Preemption does not reset
  it; a stall during rebuild is part of the gap.
- TPOT = (last output - first output) / (n_out - 1). Undefined (``None``,
  never 0) for a one-output request: there is no decode interval to average.
- end-to-end = finish - arrival; queue time = admission - arrival.

Deadlines use the same origins:

    first-token deadline = original arrival + TTFT limit        (F30)
    next-token deadline  = previous output emission + TBT limit (F31)
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
from numpy.typing import NDArray

from iterserve.metrics.timeline import RequestTimeline


@dataclass(frozen=True, slots=True)
class RequestClocks:
    """Observed clocks of one request, in seconds. ``None`` means undefined or
    not yet observed; it is never replaced by 0. ``tbt_gaps_s`` is a tuple,
    or :class:`EmissionGaps` for a compact timeline (see :func:`tbt_gaps_s`)."""

    request_id: str
    num_output_tokens: int
    ttft_s: float | None
    tbt_gaps_s: tuple[float, ...] | EmissionGaps
    tpot_s: float | None
    end_to_end_s: float | None
    queue_s: float | None


def request_clocks(timeline: RequestTimeline) -> RequestClocks:
    """Derive the clocks of one request from its observed facts."""
    emissions = timeline.emission_s
    return RequestClocks(
        request_id=timeline.request_id,
        num_output_tokens=len(emissions),
        ttft_s=emissions[0] - timeline.arrival_s if emissions else None,
        tbt_gaps_s=tbt_gaps_s(emissions),
        tpot_s=time_per_output_token_s(emissions),
        end_to_end_s=None if timeline.finish_s is None else timeline.finish_s - timeline.arrival_s,
        queue_s=None if timeline.admit_s is None else timeline.admit_s - timeline.arrival_s,
    )


@dataclass(frozen=True, slots=True)
class EmissionGaps:
    """The TBT gaps of a compact timeline, computed when read (``np.asarray``
    or iteration: a float64 array of the same IEEE differences): held, they
    cost nothing beyond the emission times the timeline already keeps."""

    emission_s: array[float]

    def __len__(self) -> int:
        return max(0, len(self.emission_s) - 1)

    def __array__(self, dtype: object = None, copy: object = None) -> NDArray[np.float64]:
        return np.diff(np.frombuffer(self.emission_s, dtype=np.float64))

    def __iter__(self) -> Iterator[float]:
        return iter(self.__array__().tolist())


def tbt_gaps_s(emission_s: Sequence[float]) -> tuple[float, ...] | EmissionGaps:
    """Gap j = y_j - y_{j-1}: a tuple of a tuple; :class:`EmissionGaps` of a
    compact timeline's ``array('d')``."""
    if isinstance(emission_s, array):
        return EmissionGaps(emission_s)
    return tuple(later - earlier for earlier, later in pairwise(emission_s))


def time_per_output_token_s(emission_s: Sequence[float]) -> float | None:
    """TPOT = (y_last - y_first) / (n_out - 1); ``None`` when n_out < 2."""
    if len(emission_s) < 2:
        return None
    return (emission_s[-1] - emission_s[0]) / (len(emission_s) - 1)


def first_token_deadline_s(arrival_s: float, ttft_limit_s: float) -> float:
    """F30: d_first = a_r + tau_TTFT, from the ORIGINAL arrival."""
    return arrival_s + ttft_limit_s


def next_token_deadline_s(previous_emission_s: float, tbt_limit_s: float) -> float:
    """F31: d_next_j = y_{j-1} + tau_TBT, from the previous output's emission."""
    return previous_emission_s + tbt_limit_s


def endpoint_deadline_s(
    arrival_s: float,
    last_emission_s: float | None,
    *,
    ttft_limit_s: float | None,
    tbt_limit_s: float | None,
) -> float | None:
    """The deadline a request is racing now: its first-token deadline while no
    output exists, its next-token deadline afterwards. ``None`` when the
    matching limit is not declared."""
    if last_emission_s is None:
        return None if ttft_limit_s is None else first_token_deadline_s(arrival_s, ttft_limit_s)
    return None if tbt_limit_s is None else next_token_deadline_s(last_emission_s, tbt_limit_s)
