"""Prefix-aware teaching score (0x09A, F62): reuse, queue, transfer and age
in one decision.

For a waiting request r on this engine's one worker w, with S_r prompt
tokens and H_r,w the exact cached-prefix tokens the memory owner published:

    U_r,w = S_r - H_r,w                                              (F62)
    estimated_finish(r, w) = queue_time(w) + prefill_per_row * U_r,w
                             + load_per_hit_row * H_r,w
    priority(r, w) = -estimated_finish(r, w) + aging_weight * (now - a_r)

The highest priority is admitted first, ties to the older request.
queue_time(w) is the prefill rows the worker's running requests still owe,
at prefill_per_row: with one worker it shifts every score alike and never
the order. The linear profile is a declared setting in clock units, not a
calibration. This is the spec's teaching score, NOT Preble's formula;
placement across workers (M5.6) is outside one engine.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from iterserve.plan import PlanBuilder, PolicyContract, views_of
from iterserve.plan.feasibility import RunningSet
from iterserve.policies.ordered import schedule_ordered
from iterserve.policies.policy import PolicyBase
from iterserve.policies.settings import PolicyConfigError
from iterserve.records.state import SchedulerState
from iterserve.records.view import RequestView


@dataclass(frozen=True, slots=True)
class PrefixAwareConfig:
    """Clock units per uncached prompt row (``prefill_per_row``) and per
    cached row loaded (``load_per_hit_row``); score per clock unit waited
    (``aging_weight``)."""

    prefill_per_row: float = 1.0
    load_per_hit_row: float = 0.0
    aging_weight: float = 1.0

    def __post_init__(self) -> None:
        for name in ("prefill_per_row", "load_per_hit_row", "aging_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not (math.isfinite(value) and value >= 0):
                raise PolicyConfigError(f"setting {name}: must be finite and >= 0, "
                                        f"got {value!r}")
        if self.prefill_per_row == 0:
            raise PolicyConfigError("setting prefill_per_row: must be > 0, got 0")


def teaching_scores(state: SchedulerState, config: PrefixAwareConfig) -> dict[str, float]:
    """priority(r, w) of every waiting request at this cut."""
    hits = state.prefix_hits
    queue_time = config.prefill_per_row * sum(
        view.remaining_rows for view in views_of(state, state.running))
    scores = {}
    for view in views_of(state, state.waiting):
        hit = hits.get(view.request_id, 0)
        finish = (queue_time + config.prefill_per_row * (view.num_prompt_tokens - hit)
                  + config.load_per_hit_row * hit)
        scores[view.request_id] = -finish + config.aging_weight * (state.now - view.arrival)
    return scores


class PrefixAware(PolicyBase[PrefixAwareConfig]):
    policy_id = "prefix-aware"
    running_set = RunningSet.PREEMPTS  # the shared preemption step (plan.victims)
    uses_prefix_hits = True
    # the score's per-request inputs: H (the published hit) and a_r; S is the view's
    tie_break_key: tuple[str, ...] = ("prefix_hit_rows", "arrival", "arrival_order",
                                      "request_id", "request_generation")
    contract = PolicyContract.parse("""
        granularity: iteration; admission order by the teaching score
        protected_identity: request_id + generation + snapshot_version
        visible_state: published prefix-hit facts H, prompt length S, arrival, the clock,
            running requests' owed prefill rows
        decision_output: admissions by highest score; running batch kept; shared preemption
        unknown_future: output lengths; future cache contents
        objective: weigh prefix reuse against queue delay, transfer and age in one score
        metric: time to first token by hit group; starvation count (F63)
        assumptions: 0x09A: identity request; eligible while waiting; one worker (w fixed);
            prefill_profile linear in uncached rows, a declared setting in clock units
        foreign_owners: prefix cache / KV allocator (hit facts); placement (M5.6)
        source: spec 0x09A prefix-aware teaching score (estimated_finish, priority)
        denominator: waiting requests admitted per decision
        premises: exact prefix-hit facts at each cut; a linear prefill profile
        evidence_class: simulated or measured here (iterserve); never source-reported
        source_version: spec M5.2 0x09A teaching score (Preble: arXiv 2407.00023, consulted only)
        non_claims: not Preble's formula or placement; no client-service bound; with
            aging_weight 0 a unique prompt can wait behind every hit
    """)

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        schedule_ordered(builder, state, lambda views: sorted(views, key=_arrival),
                         lambda views: self._picks(views, state))

    def _picks(self, waiting: Iterable[RequestView], state: SchedulerState) -> Iterator[RequestView]:
        scores = teaching_scores(state, self.config)
        yield from sorted(waiting, key=lambda v: (-scores[v.request_id], v.arrival_order))


def _arrival(view: RequestView) -> int:
    return view.arrival_order
