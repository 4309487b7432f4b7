"""The prefix-aware teaching score (0x09A, F62) on hand-built cuts, every
score worked by hand from the spec's formula:

    priority = -(queue_time + prefill_per_row * (S - H) + load_per_hit_row * H)
               + aging_weight * (now - arrival)
"""

from __future__ import annotations

import dataclasses

import pytest
from policy_helpers import state_of, waiting_view

from iterserve.policies.prefix_aware import PrefixAwareConfig, teaching_scores
from iterserve.policies.registry import make_policy
from iterserve.policies.settings import PolicyConfigError
from iterserve.records.plan import IntentKind
from iterserve.records.view import Lifecycle, RequestView


def _cut(*, running_owes: int = 5, max_num_seqs: int = 4):
    # now = 10. cold: S 12, H 0, arrived 0; hot: S 12, H 8, arrived 8;
    # warm: S 6, H 0, arrived 9. One running request owes 5 prefill rows.
    views = [
        RequestView("run", 0, 3, "client", 0, 0.0, 0, 9, 64, num_computed=9 - running_owes,
                    num_committed=9 - running_owes, lifecycle=Lifecycle.RUNNING),
        waiting_view("cold", 1, num_prompt=12)._replace(arrival=0.0),
        waiting_view("hot", 2, num_prompt=12)._replace(arrival=8.0),
        waiting_view("warm", 3, num_prompt=6)._replace(arrival=9.0),
    ]
    state = state_of(views, max_num_batched_tokens=64, max_num_seqs=max_num_seqs,
                     decision_id=10)
    return dataclasses.replace(state, prefix_hits={"hot": 8})


def _admitted(policy_settings: dict, **cut) -> list[str]:
    plan = make_policy("prefix-aware", **policy_settings).choose(_cut(**cut))
    return [i.request_id for i in plan.intents if i.kind is IntentKind.ADMIT]


def test_scores_without_aging_favour_the_cache_hit() -> None:
    config = PrefixAwareConfig(prefill_per_row=1, load_per_hit_row=0.25, aging_weight=0)
    # queue 5; cold 5 + 12 = 17; hot 5 + 4 + 8 * 0.25 = 11; warm 5 + 6 = 11
    assert teaching_scores(_cut(), config) == {"cold": -17.0, "hot": -11.0, "warm": -11.0}
    # hot and warm tie at -11: the older (hot) first; cold, oldest, last
    assert _admitted({"load_per_hit_row": 0.25, "aging_weight": 0}) == ["hot", "warm", "cold"]


def test_age_lets_the_unique_prompt_win() -> None:
    config = PrefixAwareConfig(prefill_per_row=1, load_per_hit_row=0.25, aging_weight=1)
    # + waits 10, 2, 1: cold -7, hot -9, warm -10
    assert teaching_scores(_cut(), config) == {"cold": -7.0, "hot": -9.0, "warm": -10.0}
    assert _admitted({"load_per_hit_row": 0.25, "aging_weight": 1}) == ["cold", "hot", "warm"]
    # one free sequence: only the winner is admitted
    assert _admitted({"load_per_hit_row": 0.25, "aging_weight": 1}, max_num_seqs=2) == ["cold"]


def test_queue_time_shifts_every_score_alike() -> None:
    config = PrefixAwareConfig(prefill_per_row=2, aging_weight=0)
    owes_5 = teaching_scores(_cut(running_owes=5), config)
    owes_0 = teaching_scores(_cut(running_owes=0), config)
    assert owes_0 == {"cold": -24.0, "hot": -8.0, "warm": -12.0}  # 2 * (S - H)
    assert {rid: owes_0[rid] - 10 for rid in owes_0} == owes_5  # queue 2 * 5


@pytest.mark.parametrize("setting", [{"prefill_per_row": 0}, {"aging_weight": -1},
                                     {"load_per_hit_row": float("nan")}])
def test_bad_settings_fail_when_made(setting) -> None:
    with pytest.raises(PolicyConfigError):
        make_policy("prefix-aware", **setting)
