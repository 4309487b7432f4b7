"""The prefix-aware teaching score through ``iterserve simulate`` on real
prefix hits (0x09A, F62): reuse value must not silently replace fairness.

One cold (unique, 9 rows) prompt and a hot prompt sharing two full 4-row
blocks (H = 8 of S = 9) every tick; one 9-row request per tick. By hand,
with prefill_per_row 1 and the queue empty at each cut:
- hot00 and cold tie at tick 0 (no hit yet): -9; hot00 is older in order;
- at tick t >= 1: cold -9 + aging_weight * t, hot_t -(9 - 8) = -1.
With aging_weight 0 the cold prompt waits until the hot stream ends (tick
12); with aging_weight 1 it ties hot08 at tick 8 and wins as the older.
"""

from __future__ import annotations

from fairness_helpers import request, simulate, workload


def _prefix_groups() -> dict:
    shared = list(range(100, 108))
    requests = [request("hot00", "hot", prompt=shared + [200]),
                request("cold", "cold", prompt=list(range(300, 309)))]
    requests += [request(f"hot{t:02d}", "hot", arrival=t, prompt=shared + [200 + t])
                 for t in range(1, 12)]
    return workload("prefix-groups", requests, max_num_batched_tokens=9,
                    kv={"num_kv_blocks": 64, "block_size": 4})


def test_without_aging_the_hits_win_every_tick(tmp_path) -> None:
    report = simulate(tmp_path, _prefix_groups(), "prefix-aware",
                      "--policy-setting", "aging_weight=0")
    assert report["requests"]["cold"]["first_token_cut"] == 13  # chosen at 12, after hot11
    assert report["kv"]["prefix_cache_hit_tokens"] > 0


def test_with_aging_the_unique_prompt_runs_at_tick_8(tmp_path) -> None:
    report = simulate(tmp_path, _prefix_groups(), "prefix-aware",
                      "--policy-setting", "aging_weight=1")
    assert report["requests"]["cold"]["first_token_cut"] == 9  # chosen at 8
    assert report["requests"]["hot08"]["first_token_cut"] == 10
    assert report["requests"]["hot07"]["first_token_cut"] == 8
