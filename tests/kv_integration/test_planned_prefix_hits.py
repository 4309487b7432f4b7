"""Issue 9 step 7 (0x0E: U = S - H_hit): a verified prefix hit is a fact the
plan reads. At admission the allocator holds the hit for the waiting
request, the computed frontier starts past it, the token budget pays only
uncached rows, the kv report shows the rows saved, and the decision log
replays the published hits."""

from __future__ import annotations

import dataclasses
import json

from iterserve.cli.main import main
from iterserve.engine.decision_log import DecisionLogWriter
from iterserve.engine.loop import Engine, bind_policy
from iterserve.engine.trace import RunTrace
from iterserve.policies.registry import make_policy
from iterserve.records import Capacity, RequestSpec
from iterserve.records.spec import HiddenTruth, KvSpec, OnlineWorkload, WorkloadManifest
from iterserve.records.state_digest import StateDigester
from iterserve.records.transition import claimed_prefix_rows
from iterserve.records.view import WorkKind
from iterserve.sim.factory import make_simulated_executor
from iterserve.sim.kv_report import kv_report

SHARED = tuple(range(100, 132))  # 32 shared tokens: 8 full blocks of 4 rows


def _manifest(with_token_ids: bool) -> WorkloadManifest:
    """r0 decodes for a long time; r1..r3 arrive while it holds the prefix."""
    requests = tuple(
        RequestSpec(f"r{i}", float(i * 3), 36, 30 if i == 0 else 4,
                    prompt_token_ids=SHARED + (i, i, i, i) if with_token_ids else None)
        for i in range(4))
    kv = KvSpec(num_kv_blocks=64, block_size=4, bytes_per_row=8, plan_prefix_hits=True)
    online = OnlineWorkload("shared", "iteration", Capacity(64, 8), requests, kv=kv)
    return WorkloadManifest(online, HiddenTruth({r.request_id: r.max_output_tokens
                                                 for r in requests}))


class _Plans(RunTrace):
    def __init__(self) -> None:
        super().__init__()
        self.prefill_rows = 0
        self.starts: dict[str, int] = {}
        self.outputs: dict[str, int] = {}

    def on_step(self, state, plan, result, successor) -> None:  # type: ignore[no-untyped-def]
        super().on_step(state, plan, result, successor)
        for work in plan.work:
            if work.kind is WorkKind.PREFILL_CHUNK:
                self.prefill_rows += work.width
                self.starts.setdefault(work.request_id, work.start)
        for rid, view in successor.views.items():
            self.outputs[rid] = view.num_emitted


def _run(with_token_ids: bool, log=None):  # type: ignore[no-untyped-def]
    manifest = _manifest(with_token_ids)
    executor = make_simulated_executor(manifest)
    policy = make_policy("vllm")
    plans = _Plans()
    observers = [plans]
    if log is not None:
        observers.append(DecisionLogWriter(log, bind_policy(manifest.online, policy),
                                           executor.capacity()))
    engine = Engine(manifest.online, policy, executor, observers)
    engine.run(max_iterations=1_000)
    assert engine.is_done
    assert executor.kv is not None and executor.kv.manager.audit().num_blocks_used == 0
    return plans, kv_report(executor.kv, plans, 8)


def test_shared_prefix_plans_fewer_prefill_rows_under_vllm() -> None:
    cold, cold_report = _run(with_token_ids=False)
    warm, warm_report = _run(with_token_ids=True)
    assert cold.prefill_rows == 4 * 36
    assert warm.starts == {"r0": 0, "r1": 32, "r2": 32, "r3": 32}  # frontier past the hit
    assert warm.prefill_rows == 36 + 3 * 4  # only uncached rows are planned
    assert warm_report is not None and cold_report is not None
    assert warm_report["prefill_rows_saved"] == cold.prefill_rows - warm.prefill_rows == 96
    assert cold_report["prefill_rows_saved"] == 0
    assert warm.outputs == cold.outputs


def test_published_hits_replay_from_the_log(tmp_path, capsys) -> None:
    path = tmp_path / "decisions.jsonl"
    with path.open("w") as log:
        _run(with_token_ids=True, log=log)
    assert '"claimed_prefix_rows":{"r1":32}' in path.read_text()
    assert main(["replay", str(path)]) == 0, capsys.readouterr().err
    lines = path.read_text().splitlines()
    edited = [line.replace('"claimed_prefix_rows":{"r1":32}', '"claimed_prefix_rows":{"r1":28}', 1)
              for line in lines]
    assert edited != lines
    (tmp_path / "edited.jsonl").write_text("\n".join(edited) + "\n")
    capsys.readouterr()
    assert main(["replay", str(tmp_path / "edited.jsonl")]) == 2
    assert "state_digest differs" in capsys.readouterr().err  # a 28-row hit is not the run's


def test_a_workload_without_token_ids_publishes_no_hit() -> None:
    plans, report = _run(with_token_ids=False)
    assert report is not None and report["prefix_cache_hit_tokens"] == 0
    assert dataclasses.asdict(RequestSpec("x", 0.0, 1, 1))["prompt_token_ids"] is None


def _chunked_shared_workload(plan_prefix_hits: bool) -> dict:  # type: ignore[type-arg]
    """Prompts of 9 rows sharing 8 (two blocks of 4), a budget that chunks them."""
    requests = [{"request_id": f"r{i}", "arrival": i // 2,
                 "prompt_tokens": list(range(50, 58)) + [100 + i],
                 "max_output_tokens": 1 + i % 4} for i in range(8)]
    kv = {"num_kv_blocks": 20, "block_size": 4, "plan_prefix_hits": plan_prefix_hits}
    return {"workload_id": "shared9", "clock": "iteration", "requests": requests, "kv": kv,
            "capacity": {"max_num_batched_tokens": 12, "max_num_seqs": 3}}


def test_simulate_claims_only_when_the_workload_asks_and_reports_chunks_past_the_hit(
        tmp_path, capsys) -> None:
    for opt_in in (False, True):
        path = tmp_path / f"w{opt_in}.json"
        path.write_text(json.dumps(_chunked_shared_workload(opt_in)))
        out, log = tmp_path / f"out{opt_in}", tmp_path / f"log{opt_in}.jsonl"
        assert main(["simulate", "--no-plots", "--workload", str(path), "--policy", "vllm",
                     "--out", str(out), "--decision-log", str(log)]) == 0, capsys.readouterr().err
        assert ("claimed_prefix_rows" in log.read_text()) is opt_in
        ledger = json.loads((out / "report.json").read_text())["chunk_ledger"]
        first_starts = {r["chunk_starts"][0] for r in ledger["requests"].values()}
        assert (8 in first_starts) is opt_in  # a claimed request's first chunk starts past it


class _ClaimChecker(RunTrace):
    """The decision log's digester answers claimed_prefix_rows without a
    scan of the waiting queue, and answers it the same at every cut."""

    def __init__(self) -> None:
        super().__init__()
        self.digester = StateDigester()
        self.num_claims = 0

    def on_step(self, state, plan, result, successor) -> None:  # type: ignore[no-untyped-def]
        super().on_step(state, plan, result, successor)
        self.digester.digest(state)
        assert self.digester.claimed_prefix_rows(state) == claimed_prefix_rows(state)
        self.num_claims += bool(claimed_prefix_rows(state))


def test_the_digester_knows_every_published_claim() -> None:
    manifest = _manifest(with_token_ids=True)
    checker = _ClaimChecker()
    Engine(manifest.online, make_policy("vllm"), make_simulated_executor(manifest),
           [checker]).run(max_iterations=1_000)
    assert checker.num_claims >= 1
