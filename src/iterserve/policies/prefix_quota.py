"""Prefix-group quota (0x09A, F62): reuse value must not silently replace fairness.

Waiting requests are grouped by their cached-prompt fraction H/S from the
memory owner's published prefix-hit facts (hot: H/S >= ``hot_fraction``).
Admissions follow a declared cycle of ``hot_share`` hot picks then
``cold_share`` cold picks (a group with nothing waiting yields its turn);
within a group the largest hit goes first, then the oldest. The cycle
position of a plan's first pick is decision_id mod (hot + cold), so it is
read from the state, not kept. ``prefix-greedy`` is the same rule with
cold_share 0: always the hot group, largest hit first. A teaching quota,
not Preble's algorithm; it claims no client-service bound.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from iterserve.policies.base import PlanBuilder, PolicyConfigError, PolicyContract
from iterserve.policies.ordered import schedule_ordered
from iterserve.records.plan import IterationPlan
from iterserve.records.spec import OnlineWorkload
from iterserve.records.state import SchedulerState
from iterserve.records.view import RequestView

_CONTRACT = PolicyContract(
    granularity="iteration; admission order by prefix-hit group",
    protected_identity="prefix-hit group (hot / cold)",
    visible_state="published prefix-hit facts H of waiting requests, prompt length S",
    decision_output="admissions in group-quota order; running batch kept; shared preemption",
    unknown_future="output lengths; future cache contents",
    objective="reuse cached prefixes without starving unique prompts",
    metric="completed requests per group; starvation count (0x09A F63)",
    assumptions="exact prefix facts from the memory owner at each cut; {shares}; "
                "no client-service bound (two clients in one group may differ)",
    foreign_owners="prefix cache / KV allocator (hit facts); placement (M5.6)",
    source="spec 0x09A teaching 2:1 group quota after Preble's local policy (not Preble)",
)


class PrefixQuota:
    policy_id = "prefix-quota"
    policy_version = "1"
    uses_prefix_hits = True
    tie_break_key: tuple[str, ...] = ("prefix_hit_rows", "arrival_order", "request_id",
                                      "request_generation")

    def __init__(self, hot_share: int = 2, cold_share: int = 1,
                 hot_fraction: float = 0.5) -> None:
        if hot_share < 1 or cold_share < 0:
            raise PolicyConfigError("prefix-quota: hot_share must be >= 1, cold_share >= 0")
        if not 0 < hot_fraction <= 1:
            raise PolicyConfigError("prefix-quota: hot_fraction must be in (0, 1]")
        self.cycle = ("hot",) * hot_share + ("cold",) * cold_share
        self.hot_fraction = hot_fraction
        shares = (f"cycle {hot_share} hot : {cold_share} cold, hot when H/S >= "
                  f"{hot_fraction:g}")
        self.contract = dataclasses.replace(
            _CONTRACT, assumptions=_CONTRACT.assumptions.format(shares=shares))

    def choose(self, workload: OnlineWorkload, state: SchedulerState) -> IterationPlan:
        builder = PlanBuilder(self, state, workload=workload)
        schedule_ordered(builder, state, lambda views: sorted(views, key=_arrival),
                         lambda views: self._picks(views, state))
        return builder.build()

    def _picks(self, waiting: list[RequestView], state: SchedulerState) -> Iterator[RequestView]:
        hits = state.prefix_hits
        groups: dict[str, list[RequestView]] = {"hot": [], "cold": []}
        for view in sorted(waiting, key=lambda v: (-hits.get(v.request_id, 0), v.arrival_order)):
            fraction = hits.get(view.request_id, 0) / view.num_prompt_tokens
            groups["hot" if fraction >= self.hot_fraction else "cold"].append(view)
        position = state.decision_id % len(self.cycle)
        while groups["hot"] or groups["cold"]:
            turn = self.cycle[position % len(self.cycle)]
            group = groups[turn] or groups["cold" if turn == "hot" else "hot"]
            position += 1
            yield group.pop(0)


class PrefixGreedy(PrefixQuota):
    """Reuse-greedy: the hot group always first, largest hit first."""

    policy_id = "prefix-greedy"

    def __init__(self) -> None:
        super().__init__(hot_share=1, cold_share=0)


def _arrival(view: RequestView) -> int:
    return view.arrival_order
