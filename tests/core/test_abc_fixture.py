"""The 0x02 A/B/C fixture: static batching versus iteration refill, through
Engine + SimulatedExecutor + RunTrace + simulate_report and through the CLI."""

from __future__ import annotations

import json

import pytest

from iterserve.cli.main import main
from iterserve.engine.loop import Engine
from iterserve.engine.trace import RunTrace
from iterserve.policies.registry import make_policy
from iterserve.records.plan import IntentKind
from iterserve.records.validate import validate_state
from iterserve.records.view import Lifecycle, WorkKind
from iterserve.records.workload import load_workload
from iterserve.sim.factory import make_simulated_executor
from iterserve.sim.report import simulate_report

from .helpers import ABC_FIXTURE, Recorder

EXPECTED = {
    # policy: iterations, useful, available, occupancy, {rid: (first_token_cut, finish_cut)}
    "static": (11, 13, 22, 13 / 22, {"A": (1, 2), "B": (1, 8), "C": (9, 11)}),
    "refill": (8, 13, 16, 0.8125, {"A": (1, 2), "B": (1, 8), "C": (3, 5)}),
}
REALIZED = {"A": 2, "B": 8, "C": 3}


def _run(policy_name):
    manifest = load_workload(ABC_FIXTURE)
    trace, recorder = RunTrace(), Recorder()
    engine = Engine(manifest.online_projection(), make_policy(policy_name),
                    make_simulated_executor(manifest), [trace, recorder])
    summary = engine.run()
    return manifest, summary, trace, recorder


@pytest.mark.parametrize("policy_name", sorted(EXPECTED))
def test_report_matches_0x02(policy_name):
    manifest, summary, trace, _ = _run(policy_name)
    iterations, useful, available, occupancy, cuts = EXPECTED[policy_name]
    report = simulate_report(manifest.online, policy_name, trace)
    assert summary.iterations == iterations == report["iterations"]
    assert report["useful_slot_iterations"] == useful
    assert report["available_slot_iterations"] == available
    assert report["idle_slot_iterations"] == available - useful
    assert report["slot_occupancy"] == pytest.approx(occupancy, abs=1e-6)
    assert "not measured GPU utilization" in report["slot_occupancy_label"]
    for rid, (first, finish) in cuts.items():
        row = report["requests"][rid]
        assert (row["first_token_cut"], row["finish_cut"]) == (first, finish), rid
        assert row["emitted_tokens"] == REALIZED[rid]
        assert row["finish_reason"] == "stop"
    # one prefill operation per prompt, G - 1 decode rows per request
    assert report["token_rows"] == {"prefill": 3, "decode": 10, "rebuild": 0}
    assert not summary.final_state.has_live


def test_static_occupancy_rounds_to_0_591():
    manifest, _, trace, _ = _run("static")
    assert round(simulate_report(manifest.online, "static", trace)["slot_occupancy"], 3) == 0.591


def test_cut_2_static_keeps_the_barrier():
    _, _, _, recorder = _run("static")
    state, plan, result, after = recorder.at_cut(2.0)
    validate_state(state)
    # SchedulerState v2 facts, identical for both policies
    a, b, c = (state.views[r] for r in "ABC")
    assert a.lifecycle is Lifecycle.FINISHED and a.num_emitted == 2
    assert b.lifecycle is Lifecycle.RUNNING and b.num_emitted == 2 and b.is_decoding
    assert c.lifecycle is Lifecycle.WAITING and c.num_emitted == 0 and c.arrival == 2
    # fixed request batch: only B's decode row, one of two slots idle
    assert [(w.request_id, w.start, w.end, w.kind) for w in plan.work] == [
        ("B", 2, 3, WorkKind.DECODE_ROW)]
    assert plan.intents == ()
    assert plan.sequences_used == 1 < state.max_num_seqs == 2
    assert after.views["B"].num_emitted == 3
    assert after.views["C"].first_token_time is None and "C" in after.waiting


def test_cut_2_refill_admits_c():
    _, _, _, recorder = _run("refill")
    state, plan, result, after = recorder.at_cut(2.0)
    assert state.views["A"].lifecycle is Lifecycle.FINISHED
    assert state.views["C"].lifecycle is Lifecycle.WAITING
    assert "A" not in state.running  # released from scheduler membership
    assert sorted((w.request_id, w.start, w.end, w.kind) for w in plan.work) == [
        ("B", 2, 3, WorkKind.DECODE_ROW), ("C", 0, 1, WorkKind.PREFILL_CHUNK)]
    assert [(i.kind, i.request_id) for i in plan.intents] == [(IntentKind.ADMIT, "C")]
    assert plan.sequences_used == 2
    # IterationResult for [cut 2, cut 3): C's prefill emits token 1, B its third
    emitted = {c.request_id: c.emitted for c in result.completed}
    assert emitted == {"B": True, "C": True}
    assert all(c.finish_reason is None for c in result.completed)
    assert after.now == 3.0
    assert after.views["C"].first_token_time == 3.0
    assert after.views["B"].num_emitted == 3
    assert {"B", "C"} <= set(after.running)  # both still live


@pytest.mark.parametrize("policy_name", sorted(EXPECTED))
def test_cli_writes_the_same_report(policy_name, tmp_path, capsys):
    rc = main(["simulate", "--no-plots", "--workload", str(ABC_FIXTURE), "--policy", policy_name,
               "--out", str(tmp_path)])
    assert rc == 0
    report = json.loads((tmp_path / "report.json").read_text())
    iterations, useful, available, occupancy, cuts = EXPECTED[policy_name]
    assert (report["iterations"], report["useful_slot_iterations"],
            report["available_slot_iterations"]) == (iterations, useful, available)
    assert report["slot_occupancy"] == pytest.approx(occupancy, abs=1e-6)
    assert {rid: (row["first_token_cut"], row["finish_cut"])
            for rid, row in report["requests"].items()} == cuts
    out = capsys.readouterr().out
    assert f"{useful}/{available}" in out and "not measured GPU utilization" in out
    # the report never carries hidden truth
    assert "realized_output_tokens" not in (tmp_path / "report.json").read_text()
