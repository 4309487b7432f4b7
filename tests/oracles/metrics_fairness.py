"""The per-client fairness figures (0x09A) in pure Python: the oracle the
product's array and time-slice reads (:mod:`iterserve.metrics.fairness`,
:mod:`iterserve.metrics.fairness_scan`) are pinned equal to."""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from iterserve.metrics.fairness import ServiceGap, backlog_intervals
from oracles.metrics_service import service_increments


def client_figures(timelines, window, weights, phis):
    """Per client, (service, completed events, longest unserved stretch) in
    pure Python: every fact in ``window`` as a tuple, summed in (time,
    amount) order; the longest stretch of each backlog interval without a
    fact."""
    steps: dict[str, list[tuple[float, float]]] = {}
    for timeline in timelines:
        phi = phis.get(timeline.client_id, 1.0)
        for time_s, amount in service_increments(timeline, weights):
            if window.contains(time_s):
                steps.setdefault(timeline.client_id, []).append((time_s, amount / phi))
    backlog = backlog_intervals(timelines, window)
    figures = {}
    for client, values in steps.items():
        longest = 0.0
        for start, end in backlog.get(client, []):
            marks = [start, *(t for t, _ in sorted(values) if start < t <= end), end]
            longest = max(longest, *(b - a for a, b in pairwise(marks)))
        figures[client] = (sum(a for _, a in sorted(values)), len({t for t, _ in values}),
                           longest)
    return figures


def gap_on(joint, f, g, f_steps, g_steps):
    """The widest service difference on ``joint`` as a Python walk, one
    tuple per fact, each equal-time group read after its last fact."""
    start, end = joint
    f_in, g_in = f_steps.within(start, end), g_steps.within(start, end)
    times = np.concatenate([f_in.times_s, g_in.times_s])
    amounts = np.concatenate([f_in.amounts, -g_in.amounts])
    order = np.lexsort((amounts, times))
    moves = list(zip(times[order].tolist(), amounts[order].tolist(), strict=True))
    level, low, high = 0.0, (0.0, start), (0.0, start)
    index = 0
    while index < len(moves):
        time_s = moves[index][0]
        while index < len(moves) and moves[index][0] == time_s:
            level += moves[index][1]
            index += 1
        if level < low[0]:
            low = (level, time_s)
        if level > high[0]:
            high = (level, time_s)
    if high[1] >= low[1]:
        return ServiceGap(high[0] - low[0], (f, g), (low[1], high[1]))
    return ServiceGap(high[0] - low[0], (g, f), (high[1], low[1]))
