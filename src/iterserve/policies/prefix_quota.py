"""Prefix-group quota (0x09A, F62): reuse value must not silently replace fairness.

Waiting requests are grouped by their cached-prompt fraction H/S from the
memory owner's published prefix-hit facts (hot: H/S >= ``hot_fraction``).
Admissions follow a declared cycle of ``hot_share`` hot picks then
``cold_share`` cold picks (a group with nothing waiting yields its turn);
largest hit first within a group, then the oldest. A plan's first pick
sits at decision_id mod (hot + cold) of the cycle (read from the state).
``prefix-greedy``: cold_share 0 (hot always, largest hit first).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from iterserve.plan import PlanBuilder, PolicyContract
from iterserve.plan.feasibility import RunningSet
from iterserve.policies.ordered import schedule_ordered
from iterserve.policies.policy import PolicyBase
from iterserve.policies.settings import PolicyConfigError, check_count
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
    assumptions="0x09A: identity hit group; eligible while waiting; cost: admissions; "
                "publication: admission; guarantee: a waiting group is picked once per "
                "cycle. Exact prefix facts from the memory owner at each cut; {shares}; "
                "no client-service bound (two clients in one group may differ)",
    foreign_owners="prefix cache / KV allocator (hit facts); placement (M5.6)",
    source="spec 0x09A teaching 2:1 group quota after Preble's local policy (not Preble)",
    denominator="completed requests per prefix-hit group",
    premises="exact prefix-hit facts at each cut; a waiting group stays eligible",
    evidence_class="simulated or measured here (iterserve); never source-reported",
    source_version="spec M5.2 0x09A Loop 8 quota (Preble: arXiv 2407.00023, consulted only)",
    non_claims="not Preble's algorithm or placement; no client-service bound",
)


@dataclass(frozen=True, slots=True)
class QuotaConfig:
    """``hot_share`` hot picks then ``cold_share`` cold ones per cycle; a
    waiting request is hot when its hit fraction H/S >= ``hot_fraction``."""

    hot_share: int = 2
    cold_share: int = 1
    hot_fraction: float = 0.5

    def __post_init__(self) -> None:
        check_count("hot_share", self.hot_share)
        if isinstance(self.cold_share, bool) or not isinstance(self.cold_share, int) \
                or self.cold_share < 0:
            raise PolicyConfigError(f"setting cold_share: must be an integer >= 0, "
                                    f"got {self.cold_share!r}")
        fraction = self.hot_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) \
                or not 0 < fraction <= 1:
            raise PolicyConfigError(f"setting hot_fraction: must be in (0, 1], got {fraction!r}")


@dataclass(frozen=True, slots=True)
class GreedyConfig(QuotaConfig):
    """Reuse-greedy: hot picks only (cold when nothing hot waits)."""

    hot_share: int = 1
    cold_share: int = 0


class PrefixQuota(PolicyBase[QuotaConfig]):
    policy_id = "prefix-quota"
    running_set = RunningSet.PREEMPTS  # the shared preemption step (plan.victims)
    uses_prefix_hits = True
    tie_break_key: tuple[str, ...] = ("prefix_hit_rows", "arrival_order", "request_id",
                                      "request_generation")

    def __init__(self, config: QuotaConfig | None = None) -> None:
        super().__init__(config)
        c = self.config
        self.cycle = ("hot",) * c.hot_share + ("cold",) * c.cold_share
        shares = (f"cycle {c.hot_share} hot : {c.cold_share} cold, hot when H/S >= "
                  f"{c.hot_fraction:g}")
        self.contract = dataclasses.replace(
            _CONTRACT, assumptions=_CONTRACT.assumptions.format(shares=shares))

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        schedule_ordered(builder, state, lambda views: sorted(views, key=_arrival),
                         lambda views: self._picks(views, state))

    def _picks(self, waiting: Iterable[RequestView], state: SchedulerState) -> Iterator[RequestView]:
        hits = state.prefix_hits
        groups: dict[str, list[RequestView]] = {"hot": [], "cold": []}
        for view in sorted(waiting, key=lambda v: (-hits.get(v.request_id, 0), v.arrival_order)):
            fraction = hits.get(view.request_id, 0) / view.num_prompt_tokens
            groups["hot" if fraction >= self.config.hot_fraction else "cold"].append(view)
        position = state.decision_id % len(self.cycle)
        while groups["hot"] or groups["cold"]:
            turn = self.cycle[position % len(self.cycle)]
            group = groups[turn] or groups["cold" if turn == "hot" else "hot"]
            position += 1
            yield group.pop(0)


class PrefixGreedy(PrefixQuota):
    """Reuse-greedy: the hot group always first, largest hit first."""

    policy_id = "prefix-greedy"
    config_type = GreedyConfig


def _arrival(view: RequestView) -> int:
    return view.arrival_order
