"""Issue 14 part 1: a policy without a preemption path on a pool that can
never hold its worst running set is refused before the first decision
(:class:`InfeasibleRun`; ``iterserve simulate`` exits 2 with one line and
writes nothing), and the worst running sets are what the policies allow."""

from __future__ import annotations

from pathlib import Path

import pytest

from iterserve.cli.main import main
from iterserve.engine.loop import Engine
from iterserve.plan.feasibility import InfeasibleRun, RunningSet, worst_running_blocks
from iterserve.policies.registry import make_policy, policy_names
from iterserve.records.spec import Capacity, KvSpec, OnlineWorkload, RequestSpec
from iterserve.records.state import CapacityFacts
from iterserve.records.workload import load_workload
from iterserve.sim.factory import make_simulated_executor

SMALL_KV = Path(__file__).resolve().parents[2] / "examples" / "small_kv.json"
NO_PREEMPTION = ["decode-first", "decode-first-bounded", "prefill-first", "refill", "sarathi"]


def test_the_policies_without_a_preemption_path_are_the_documented_ones() -> None:
    without = {name for name in policy_names()
               if make_policy(name, **({"chunk_size": 4} if name == "sarathi" else {}))
               .running_set is not RunningSet.PREEMPTS}  # type: ignore[attr-defined]
    assert without == {*NO_PREEMPTION, "static"}
    doc = (Path(__file__).resolve().parents[2] / "docs" / "policies.md").read_text()
    for name in sorted(without):
        assert f"`{name}`" in doc.split("Policies without a preemption path")[1][:900]


@pytest.mark.parametrize("policy", NO_PREEMPTION)
def test_small_kv_is_refused_before_the_first_decision(policy: str) -> None:
    manifest = load_workload(SMALL_KV)
    chosen = make_policy(policy, **({"chunk_size": 16} if policy == "sarathi" else {}))
    with pytest.raises(InfeasibleRun, match=f"policy '{policy}' has no preemption path") as info:
        Engine(manifest.online, chosen, make_simulated_executor(manifest))
    assert "\n" not in str(info.value) and "the pool has 24" in str(info.value)


def test_the_cli_exits_2_with_one_line_and_writes_nothing(tmp_path: Path, capsys) -> None:
    log = tmp_path / "log" / "decisions.jsonl"
    rc = main(["simulate", "--no-plots", "--workload", str(SMALL_KV), "--policy", "refill",
               "--out", str(tmp_path / "out"), "--decision-log", str(log)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("iterserve simulate: error: policy 'refill' has no preemption path")
    assert not log.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("policy", ["static", "orca", "vllm", "sarathi-serve", "edf"])
def test_small_kv_still_runs_where_it_can_finish(policy: str) -> None:
    manifest = load_workload(SMALL_KV)
    engine = Engine(manifest.online, make_policy(policy), make_simulated_executor(manifest))
    engine.run(max_iterations=100_000)
    assert engine.is_done


def _workload(*requests: tuple[float, int, int], max_num_batched_tokens: int = 8,
              max_num_seqs: int = 4) -> OnlineWorkload:
    specs = tuple(RequestSpec(f"r{i}", arrival, p, m) for i, (arrival, p, m) in enumerate(requests))
    return OnlineWorkload("w", "iteration", Capacity(max_num_batched_tokens, max_num_seqs), specs,
                          kv=KvSpec(100, 2))


def test_worst_running_sets() -> None:
    facts = CapacityFacts(2, 10, 10)  # 20 rows
    # peaks (p + m - 1 rows, capped at 20 rows): 3, 5, 4, 10 blocks; "r4" never fits
    workload = _workload((0, 2, 5), (1, 4, 7), (2, 6, 3), (3, 15, 30), (4, 21, 1))
    assert worst_running_blocks(RunningSet.UNBOUNDED, workload, facts) == 3 + 5 + 4 + 10
    assert worst_running_blocks(RunningSet.CAPPED, _workload(*[(0, 2, 5), (1, 4, 7), (2, 6, 3),
                                                               (3, 15, 30)], max_num_seqs=2),
                                facts) == 10 + 5
    # a cohort from r0 takes 2 + 4 rows whole and r2 partly (8-row budget):
    # r0 leaves after step 4 (3 blocks), r1 at step 6 (5 blocks); r2 counts
    # at its growth bound: at step 4, 3 + 4 + min(6 + 4, 8) rows -> 3 + 4 + 4
    assert worst_running_blocks(RunningSet.COHORT, _workload((0, 2, 5), (1, 4, 7), (2, 6, 3)),
                                facts) == 3 + 4 + 4
