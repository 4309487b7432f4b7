"""The 0x09A must-show fixtures, each through ``iterserve simulate``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fairness_helpers import request, simulate, two_clients, workload

from iterserve.cli.main import main

WP1_WQ2 = {"prompt_weight": 1, "output_weight": 2}


def _services(report: dict) -> dict[str, float]:
    return {c: v["service"] for c, v in report["fairness"]["per_client"].items()}


def test_least_service_alternates_and_keeps_the_shared_backlog_gap_at_2(tmp_path) -> None:
    fifo = simulate(tmp_path, two_clients(), "refill")
    fair = simulate(tmp_path, two_clients(), "least-service")
    assert fifo["fairness"]["max_backlogged_gap"]["value"] == 16
    assert fair["fairness"]["max_backlogged_gap"]["value"] == 2
    assert _services(fifo) == _services(fair) == {"A": 16, "B": 8}
    order = sorted(fair["requests"], key=lambda rid: fair["requests"][rid]["finish_cut"])
    assert [rid[0] for rid in order[:8]] == list("ABABABAB")


def test_vtc_lifts_a_newly_active_client_to_the_minimum_active_counter_f56(tmp_path) -> None:
    # A joins at tick 0 with a 4-row prompt (charged 4 at join; its first chunk
    # emits nothing), B becomes active at tick 1 with a stored counter of 0
    spec = workload("vtc-lift", [request("A0", "A", prompt=4, max_out=2),
                                 request("B0", "B", arrival=1)],
                    max_num_batched_tokens=2, max_num_seqs=2, fairness=WP1_WQ2)
    trace = simulate(tmp_path, spec, "vtc")["fairness"]["ledger_trace"]["decisions"]
    assert trace[0]["counters"] == {"A": 0.0}
    assert trace[0]["counters_after"] == {"A": 4.0}
    assert trace[1]["now"] == 1 and trace[1]["counters"] == {"A": 4.0, "B": 4.0}


def test_completion_reconciled_failure_trace(tmp_path) -> None:
    # tick 0: A's input event (4 rows of a 5-row prompt) is selected, provisional 4,
    # and fails; tick 1 retries and completes the four input tokens
    spec = workload("reconciled-failure", [request("A0", "A", prompt=5, max_out=1)],
                    max_num_batched_tokens=4, max_num_seqs=1, fairness=WP1_WQ2,
                    fixture_only_hidden_truth={"injected_failures": [
                        {"request_id": "A0", "decision_id": 0}]})
    report = simulate(tmp_path, spec, "vtc-completed")
    tick0, tick1 = report["fairness"]["ledger_trace"]["decisions"][:2]
    assert (tick0["w_done"], tick0["c_select_reserved"], tick0["w_done_after"]) == (
        {}, {"A": 4.0}, {})  # C_select[A] 0 -> 4 -> 0, W_done[A] stays 0
    assert tick0["failed"] == ["A0"]
    assert (tick1["w_done"], tick1["c_select_reserved"], tick1["w_done_after"]) == (
        {}, {"A": 4.0}, {"A": 4.0})  # C_select[A] 0 -> 4, W_done[A] 0 -> 4
    # paper VTC charges at join, so the failed attempt is charged all the same
    paper = simulate(tmp_path, spec, "vtc")["fairness"]["ledger_trace"]["decisions"]
    assert paper[0]["counters_after"] == {"A": 5.0}


def _aging_trace() -> dict:
    """A low request (priority 4) at tick 0, one high request (priority 0) every tick."""
    requests = [request("low", "low", priority=4)]
    requests += [request(f"high{t:02d}", "high", arrival=t, priority=0) for t in range(16)]
    return workload("aging-0x09A", requests)


def test_static_priority_gives_the_low_request_nothing_while_high_requests_flow(tmp_path) -> None:
    report = simulate(tmp_path, _aging_trace(), "priority", "--fairness-horizon", "16")
    assert report["requests"]["low"]["first_token_cut"] == 17  # only after the stream ends
    assert report["fairness"]["starvation"]["starved_clients"] == ["low"]


def test_aging_makes_the_low_request_win_at_tick_8_f61(tmp_path) -> None:
    report = simulate(tmp_path, _aging_trace(), "priority-aging", "--fairness-horizon", "16")
    assert report["requests"]["low"]["first_token_cut"] == 9  # chosen at now = 8, done at 9
    assert report["requests"]["high08"]["first_token_cut"] == 10
    assert report["fairness"]["starvation"]["num_starved"] == 0


def test_client_flood_same_totals_different_on_time_owners_0x09a(tmp_path) -> None:
    # 12 events, one per tick; a 6.5 s TTFT limit leaves six on-time completions
    flags = ("--slo-ttft-ms", "6500")
    reports = {policy: simulate(tmp_path, two_clients(), policy, *flags)
               for policy in ("refill", "least-service")}
    valid = {policy: {client: entry["outcomes"]["num_slo_valid"]
                      for client, entry in report["metrics"]["per_client"].items()}
             for policy, report in reports.items()}
    assert valid == {"refill": {"A": 6, "B": 0}, "least-service": {"A": 3, "B": 3}}
    for report in reports.values():
        assert report["metrics"]["outcomes"]["num_completed"] == 12
        assert report["metrics"]["outcomes"]["num_slo_valid"] == 6
        assert _services(report) == {"A": 16, "B": 8}
    table = (Path(reports["refill"]["_out"]) / "report.md").read_text()
    assert "| B | 1 | 8 | 4 | 12 | 9 | no | 0 | 4 | 0 | 0 |" in table


def test_starvation_guard_forces_the_starved_client_and_counts_firings(tmp_path) -> None:
    flags = ("--fairness-horizon", "6", "--decision-log", str(tmp_path / "guarded.jsonl"))
    plain = simulate(tmp_path, _aging_trace(), "priority", "--fairness-horizon", "6")
    guarded = simulate(tmp_path, _aging_trace(), "priority", "--starvation-horizon", "4", *flags)
    assert plain["fairness"]["starvation"]["starved_clients"] == ["low"]
    assert guarded["fairness"]["starvation"]["num_starved"] == 0
    assert guarded["requests"]["low"]["first_token_cut"] == 5  # forced at now = 4
    guard = guarded["fairness"]["starvation_guard"]
    assert guard["horizon"] == 4 and guard["num_fired"] == 1
    (firing,) = guard["firings"]
    assert (firing["now"], firing["request_id"], firing["intent"]) == (4, "low", "admit")
    assert firing["reason"].startswith("starvation_guard: client low unserved for 4")
    assert "fired 1 time(s)" in (Path(guarded["_out"]) / "report.md").read_text()
    assert main(["replay", str(tmp_path / "guarded.jsonl")]) == 0


def test_the_guard_forces_a_running_request_with_a_guard_intent(tmp_path) -> None:
    # mlfq (1 ms per row): after its first output the long job sits in Q2 while a
    # 1 ms job joins Q1 every ms, so its running request is left out of the batch
    requests = [request("long", "long", prompt=1, max_out=4)]
    requests += [request(f"s{t:02d}", "short", arrival=t) for t in range(1, 12)]
    spec = workload("guard-running", requests, clock="ms")
    cost = ("--cost-model", "linear:0,1,1")
    plain = simulate(tmp_path, spec, "mlfq", *cost)
    guarded = simulate(tmp_path, spec, "mlfq", *cost, "--starvation-horizon", "3")
    assert plain["requests"]["long"]["finish_cut"] > 12
    firings = guarded["fairness"]["starvation_guard"]["firings"]
    assert firings and {f["intent"] for f in firings} == {"guard"}
    assert guarded["requests"]["long"]["finish_cut"] < plain["requests"]["long"]["finish_cut"]


def _prefix_groups() -> dict:
    """One cold (unique) prompt and a hot prompt sharing 8 of 9 rows every tick."""
    shared = list(range(100, 108))
    requests = [request("hot00", "hot", prompt=shared + [200]),
                request("cold", "cold", prompt=list(range(300, 309)))]
    requests += [request(f"hot{t:02d}", "hot", arrival=t, prompt=shared + [200 + t])
                 for t in range(1, 12)]
    return workload("prefix-groups", requests, max_num_batched_tokens=9,
                    kv={"num_kv_blocks": 64, "block_size": 4})


def test_prefix_groups_greedy_starves_cold_and_the_2_to_1_quota_does_not(tmp_path) -> None:
    window = ("--window", "0", "9.5")  # the first nine completions
    greedy = simulate(tmp_path, _prefix_groups(), "prefix-greedy", *window)
    quota = simulate(tmp_path, _prefix_groups(), "prefix-quota", *window,
                     "--decision-log", str(tmp_path / "quota.jsonl"))

    def completed(report: dict) -> dict[str, int]:
        return {c: v["num_completed_events"] for c, v in report["fairness"]["per_client"].items()}

    assert completed(greedy) == {"hot": 9, "cold": 0}
    assert completed(quota) == {"hot": 8, "cold": 1}
    assert greedy["kv"]["prefix_cache_hit_tokens"] > 0  # the groups come from real hits
    lines = (tmp_path / "quota.jsonl").read_text().splitlines()
    assert any('"prefix_hits"' in line for line in lines)
    assert main(["replay", str(tmp_path / "quota.jsonl")]) == 0


def _mlfq_trace() -> dict:
    """A long job (first step 4 ms) and a 1 ms job arriving every ms (0x09A)."""
    requests = [request("long", "long", prompt=4, max_out=3)]
    requests += [request(f"s{t:02d}", "short", arrival=t) for t in range(20)]
    return workload("mlfq-0x09A", requests, max_num_batched_tokens=4, clock="ms")


def test_mlfq_skip_join_starvation_and_promotion(tmp_path) -> None:
    cost = ("--cost-model", "linear:0,1,1", "--fairness-horizon", "15")
    never = simulate(tmp_path, _mlfq_trace(), "mlfq", *cost,
                     "--policy-setting", "alpha_ms=1000000")
    promoted = simulate(tmp_path, _mlfq_trace(), "mlfq", *cost, "--policy-setting", "alpha_ms=3")
    last_short = never["requests"]["s19"]["finish_cut"]
    # skip-join: cost 4 enters the 4 ms queue, so the 1 ms jobs go first
    assert never["requests"]["s00"]["first_token_cut"] == 1
    assert never["requests"]["long"]["first_token_cut"] > last_short  # starves meanwhile
    assert never["fairness"]["starvation"]["starved_clients"] == ["long"]
    assert promoted["requests"]["long"]["first_token_cut"] == 7  # promoted at 3 ms
    assert promoted["requests"]["long"]["finish_cut"] < promoted["requests"]["s19"]["finish_cut"]
    assert promoted["fairness"]["starvation"]["num_starved"] == 0


def test_mlfq_queue_levels_f54_f55() -> None:
    from iterserve.cost import LinearIterationCost
    from iterserve.policies.mlfq import Mlfq, MlfqConfig
    from iterserve.records.state import RunRules, SchedulerState
    from iterserve.records.view import RequestView

    policy = Mlfq(MlfqConfig(cost_model=LinearIterationCost(0, 1, 1)))
    state = SchedulerState(0, 0, 0.0, (), (), (), (), {}, 4, 1, rules=RunRules("ms"))

    def view(prompt: int, computed: int = 0, emitted: int = 0) -> RequestView:
        return RequestView("r", 0, 0, "c", 0, 0.0, 0, prompt, 8, num_emitted=emitted,
                           num_computed=computed, num_committed=computed,
                           last_output_time=0.0 if emitted else None)

    assert policy.config.quantum_ms(0) < policy.config.quantum_ms(1)  # F54
    assert policy.queue_level(view(1), state, 1.0) == 0
    assert policy.queue_level(view(4), state, 1.0) == 2  # F55: min{j : q_j >= 4}
    assert policy.queue_level(view(4, 4, 1), state, 1.0) == 3  # q_3 = 4 spent: demoted


def test_policy_settings_reach_the_fair_policies_and_replay(tmp_path) -> None:
    spec = workload("settings", [request("A0", "A", prompt=2), request("B0", "B", prompt=3)],
                    max_num_batched_tokens=8, max_num_seqs=2, fairness=WP1_WQ2)
    log = str(tmp_path / "vtc.jsonl")
    report = simulate(tmp_path, spec, "vtc", "--policy-setting", "prompt_weight=3",
                      "--decision-log", log)
    after = report["fairness"]["ledger_trace"]["decisions"][0]["counters_after"]
    assert after == {"A": 3 * 2 + 2, "B": 3 * 3 + 2}  # the setting's w_p, the run's w_q
    assert main(["replay", log]) == 0
    aging = simulate(tmp_path, _aging_trace(), "priority-aging", "--policy-setting", "q_age=1")
    assert aging["requests"]["low"]["first_token_cut"] == 5  # 4 - floor(4 / 1) = 0 at tick 4


@pytest.mark.parametrize(("policy", "setting"), [
    ("priority-aging", "q_age=0"), ("mlfq", "alpha_ms=-1"), ("mlfq", "num_queues=0"),
    ("vtc", "output_weight=-2"), ("prefix-quota", "hot_fraction=2"),
    ("prefix-quota", "cold_share=-1")])
def test_bad_fair_policy_settings_are_one_line_exit_2(tmp_path, capsys, policy, setting) -> None:
    path = tmp_path / "w.json"
    path.write_text(json.dumps(two_clients()))
    assert main(["simulate", "--workload", str(path), "--policy", policy, "--out",
                 str(tmp_path / "o"), "--no-plots", "--policy-setting", setting]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and setting.split("=")[0] in err[0]


def test_replay_with_the_workload_rederives_faults_and_prefix_hits(tmp_path) -> None:
    # results and prefix-hit facts are re-derived from the workload's hidden truth
    failing = workload("reconciled-failure", [request("A0", "A", prompt=5, max_out=1)],
                       max_num_batched_tokens=4, fairness=WP1_WQ2,
                       fixture_only_hidden_truth={"injected_failures": [
                           {"request_id": "A0", "decision_id": 0}]})
    for name, spec, policy in (("fail", failing, "vtc-completed"),
                               ("prefix", _prefix_groups(), "prefix-quota")):
        log, path = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.json"
        simulate(tmp_path, spec, policy, "--decision-log", str(log))
        path.write_text(json.dumps(spec))
        assert main(["replay", str(log), "--workload", str(path)]) == 0
    edited = dict(failing, fixture_only_hidden_truth={"injected_failures": []})
    (tmp_path / "edited.json").write_text(json.dumps(edited))
    assert main(["replay", str(tmp_path / "fail.jsonl"), "--workload",
                 str(tmp_path / "edited.json")]) == 2  # the hidden-truth digest binds the faults
