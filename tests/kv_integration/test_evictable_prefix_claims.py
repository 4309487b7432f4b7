"""0x0E (F72): U = S - H_hit counts every hit the allocator can prove, the
evictable cached blocks included: the claim reclaims them for the request.

The expectations are derived by hand from the fixture below (block size 4):

* r0 (prompt SHARED + 0000, 36 rows, 2 outputs) prefills 36 rows and decodes
  row 36, so it held 10 blocks; at release its 9 full committed blocks stay
  cached (refcount 0, evictable) and the 10th (one row) is free: 9 cached + 3
  free of 12.
* r1 (SHARED + 1111) arrives after r0 is gone. Its hit is the 8 full blocks
  of SHARED (the hit never covers the last prompt row, so the 9th block,
  rows 32..35, is not looked up): H_hit = 32 rows, all 8 blocks evictable.
  So U = 36 - 32 = 4: its first interval is [32, 36), 4 token rows.
* The facts still count the 8 reclaimed blocks as free (12 free), so the plan
  must charge them to r1: 8 + blocks_opened(32, 4) = 9 blocks, 3 left.
  r2 (16 fresh rows, 4 blocks) then does not fit: physically only 3 free
  blocks and 1 cached block (r0's 9th) are left after r1's claim, 4 in all,
  and r1 takes 1 of them.
"""

from __future__ import annotations

import dataclasses

import pytest

from iterserve.engine.loop import Engine
from iterserve.engine.trace import RunTrace
from iterserve.kv import BlockManager, BlockManagerConfig, RequestKey
from iterserve.policies.registry import make_policy
from iterserve.records import Capacity, RequestSpec
from iterserve.records.errors import KvCapacityExceeded
from iterserve.records.spec import HiddenTruth, KvSpec, OnlineWorkload, WorkloadManifest
from iterserve.records.validate import validate_plan
from iterserve.sim.factory import make_simulated_executor

SHARED = tuple(range(100, 132))  # 32 tokens: 8 full blocks of 4 rows


def _manifest() -> WorkloadManifest:
    requests = (
        RequestSpec("r0", 0.0, 36, 2, prompt_token_ids=SHARED + (0, 0, 0, 0)),
        RequestSpec("r1", 5.0, 36, 2, prompt_token_ids=SHARED + (1, 1, 1, 1)),
        RequestSpec("r2", 5.0, 16, 1, prompt_token_ids=tuple(range(500, 516))),
    )
    kv = KvSpec(num_kv_blocks=12, block_size=4, bytes_per_row=8, plan_prefix_hits=True)
    online = OnlineWorkload("evictable", "iteration", Capacity(64, 8), requests, kv=kv)
    return WorkloadManifest(online, HiddenTruth({"r0": 2, "r1": 2, "r2": 1}))


class _Decisions(RunTrace):
    def __init__(self) -> None:
        super().__init__()
        self.steps: list[tuple[object, object]] = []

    def on_step(self, state, plan, result, successor) -> None:  # type: ignore[no-untyped-def]
        super().on_step(state, plan, result, successor)
        self.steps.append((state, plan))


def _run() -> tuple[Engine, _Decisions, object]:
    manifest = _manifest()
    executor = make_simulated_executor(manifest)
    decisions = _Decisions()
    engine = Engine(manifest.online, make_policy("vllm"), executor, [decisions])
    engine.run(max_iterations=100)
    assert engine.is_done
    return engine, decisions, executor


def _work(plan) -> dict[str, tuple[int, int]]:  # type: ignore[no-untyped-def]
    return {item.request_id: (item.start, item.end) for item in plan.work}


def test_a_hit_on_evictable_blocks_is_claimed_and_charges_only_uncached_rows() -> None:
    _, decisions, executor = _run()
    works = [_work(plan) for _, plan in decisions.steps if plan.work]
    assert works == [
        {"r0": (0, 36)}, {"r0": (36, 37)},  # r0 prefills, decodes, leaves 9 cached blocks
        {"r1": (32, 36)},  # U = S - H_hit = 36 - 32: the 8 evictable blocks are the hit
        {"r1": (36, 37)},  # r2 still waits: 9 of 12 blocks are r1's, r1 opens a 10th
        {"r2": (0, 16)},
    ]
    first_r1 = next(state for state, plan in decisions.steps if "r1" in _work(plan))
    assert first_r1.reclaimed_prefix_blocks == {"r1": 8}  # all 8 hit blocks were evictable
    assert first_r1.capacity.num_blocks_free == 12  # the facts still count them free
    assert executor.kv.stats().num_failed_allocations == 0
    assert executor.kv.manager.audit().num_blocks_used == 0


def test_the_plan_that_ignores_the_reclaimed_blocks_overcommits_and_is_refused() -> None:
    manifest = _manifest()
    _, decisions, _ = _run()
    state, plan = next((s, p) for s, p in decisions.steps if "r1" in _work(p))
    validate_plan(manifest.online, state, plan)  # the run's own plan is legal
    # the same policy, told nothing of the reclaim, admits r2 beside r1:
    # 1 + 4 new blocks of 12 free, while 8 of those 12 are r1's hit
    blind = make_policy("vllm").choose(dataclasses.replace(state, reclaimed_prefix_blocks={}))
    assert _work(blind) == {"r1": (32, 36), "r2": (0, 16)}
    with pytest.raises(KvCapacityExceeded, match="13 new KV blocks"):
        validate_plan(manifest.online, state, blind)


class _Usage(RunTrace):
    """The allocator's block counts right after each iteration executed."""

    def __init__(self, executor) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.executor = executor
        self.after: list[tuple[dict[str, tuple[int, int]], int, int, int | None]] = []

    def on_step(self, state, plan, result, successor) -> None:  # type: ignore[no-untyped-def]
        super().on_step(state, plan, result, successor)
        usage = self.executor.kv.manager.usage()
        self.after.append((_work(plan), usage.num_blocks_used, usage.num_blocks_cached,
                           successor.capacity.num_blocks_free))


def test_a_claim_the_plan_does_not_schedule_holds_nothing_while_the_iteration_runs() -> None:
    """Budget 16: r0 prefills in chunks of 16; r2 (16 rows, ahead of r1 in
    arrival order) takes the whole budget of its decision, so r1 is claimed
    (8 evictable blocks) but not scheduled. Its claim must end before that
    iteration runs: only r2's 4 blocks are used after it (3 free blocks and
    r0's LRU tail block, rows 32..35, evicted), 8 cached remain, and the facts
    after it say 12 - 4 = 8 free. r2 ends at its first output and r1 then
    runs from its hit."""
    requests = (
        RequestSpec("r0", 0.0, 36, 2, prompt_token_ids=SHARED + (0, 0, 0, 0)),
        RequestSpec("r2", 5.0, 16, 1, prompt_token_ids=tuple(range(500, 516))),
        RequestSpec("r1", 5.0, 36, 2, prompt_token_ids=SHARED + (1, 1, 1, 1)),
    )
    kv = KvSpec(num_kv_blocks=12, block_size=4, bytes_per_row=8, plan_prefix_hits=True)
    online = OnlineWorkload("unscheduled", "iteration", Capacity(16, 8), requests, kv=kv)
    manifest = WorkloadManifest(online, HiddenTruth({"r0": 2, "r1": 2, "r2": 1}))
    executor = make_simulated_executor(manifest)
    usage = _Usage(executor)
    engine = Engine(online, make_policy("vllm"), executor, [usage])
    engine.run(max_iterations=100)
    assert engine.is_done
    assert [step for step in usage.after if step[0]] == [
        ({"r0": (0, 16)}, 4, 0, 8), ({"r0": (16, 32)}, 8, 0, 4), ({"r0": (32, 36)}, 9, 0, 3),
        ({"r0": (36, 37)}, 0, 9, 12),  # r0 done: 9 full blocks cached, the 10th free
        ({"r2": (0, 16)}, 0, 12, 12),  # r2 done too; r1's claim held nothing meanwhile
        ({"r1": (32, 36)}, 9, 3, 3),  # 8 reclaimed + 1 new
        # r1's row 36 evicts a second r2 block; at release its 9 full blocks
        # are cached beside r2's 2 left, its 10th (one row) is free
        ({"r1": (36, 37)}, 0, 11, 12),
    ]
    assert executor.kv.stats().num_failed_allocations == 0


def test_claim_prefix_reclaims_evictable_blocks_and_shares_held_ones() -> None:
    manager = BlockManager(BlockManagerConfig(8, 4, 0, True))
    a, c, b = RequestKey("a", 0), RequestKey("c", 0), RequestKey("b", 0)
    tokens = list(range(10, 18))  # two full blocks
    manager.allocate(a, tokens)
    manager.commit(a, 8)
    manager.allocate(c, tokens[:4] + [99])  # c shares a's first block
    manager.release(a)  # a's second block: cached, refcount 0
    before = manager.usage()
    assert (before.num_blocks_used, before.num_blocks_cached) == (2, 1)
    claimed = manager.claim_prefix(b, tokens + [7])
    assert claimed.num_rows == 8 and claimed.num_reclaimed_blocks == 1  # 1 of 2 reclaimed
    after = manager.usage()
    assert (after.num_blocks_used, after.num_blocks_cached) == (3, 0)
    assert after.num_blocks_available == before.num_blocks_available - 1
    manager.release(b)
    assert manager.usage().num_blocks_cached == 1  # back to evictable, still reusable
    manager.audit()


def test_the_reclaimed_blocks_are_logged_and_replayed(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from iterserve.cli.main import main
    from iterserve.engine.decision_log import DecisionLogWriter
    from iterserve.engine.loop import bind_policy

    manifest = _manifest()
    executor = make_simulated_executor(manifest)
    policy = make_policy("vllm")
    path = tmp_path / "decisions.jsonl"
    with path.open("w") as log:
        writer = DecisionLogWriter(log, bind_policy(manifest.online, policy), executor.capacity())
        engine = Engine(manifest.online, policy, executor, [writer])
        engine.run(max_iterations=100)
        writer.close(engine.state)
    text = path.read_text()
    assert '"reclaimed_prefix_blocks":{"r1":8}' in text
    assert main(["replay", str(path)]) == 0, capsys.readouterr().err
    edited = tmp_path / "edited.jsonl"
    edited.write_text(text.replace('"reclaimed_prefix_blocks":{"r1":8}',
                                   '"reclaimed_prefix_blocks":{"r1":7}'))
    capsys.readouterr()
    assert main(["replay", str(edited)]) == 2
    assert "differs" in capsys.readouterr().err


def test_a_second_claim_of_the_same_evictable_prefix_is_charged_too() -> None:
    """W1 and W2 (both SHARED + their own 8 rows) wait after r0 left its 8
    SHARED blocks evictable. W1 claims first and reclaims them; W2 shares
    them. W2 has the higher priority and its 8 uncached rows take the whole
    token budget (8), so only W2 runs: W1's claim ends before execution and
    W2 is left holding the 8 blocks, so it is charged them too: the
    reclaimed map is {W1: 8, W2: 8}, not {W1: 8}."""
    requests = (
        RequestSpec("r0", 0.0, 36, 1, prompt_token_ids=SHARED + (0, 0, 0, 0)),
        RequestSpec("W1", 9.0, 40, 1, priority=1, prompt_token_ids=SHARED + (1,) * 8),
        RequestSpec("W2", 9.0, 40, 1, priority=0, prompt_token_ids=SHARED + (2,) * 8),
    )
    kv = KvSpec(num_kv_blocks=16, block_size=4, bytes_per_row=8, plan_prefix_hits=True)
    online = OnlineWorkload("shared-claims", "iteration", Capacity(8, 8), requests, kv=kv)
    manifest = WorkloadManifest(online, HiddenTruth({"r0": 1, "W1": 1, "W2": 1}))
    executor = make_simulated_executor(manifest)
    decisions = _Decisions()
    engine = Engine(online, make_policy("vllm-priority"), executor, [decisions])
    engine.run(max_iterations=100)
    assert engine.is_done
    state, plan = next((s, p) for s, p in decisions.steps if "W2" in _work(p))
    assert _work(plan) == {"W2": (32, 40)}  # U = 40 - 32 = 8 rows: the whole budget
    assert state.reclaimed_prefix_blocks == {"W1": 8, "W2": 8}
    assert executor.kv.stats().num_failed_allocations == 0
