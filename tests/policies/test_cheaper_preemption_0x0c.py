"""0x0C: C_recompute vs C_preserve choose the mode per victim when the run
allows both (``kv.preemption_mode: cheaper``).

Costs by hand, cost model ``linear:2,0.5,0.1`` (2 ms + 0.5 ms per prefill
row), queue overhead 1 ms, 1000 bytes per row, write 2e6 B/s (0.5 ms per
row), read 4e6 B/s (0.25 ms per row), staging 0.5 ms:

    C_recompute(T) = 2 + 0.5 T + 1        C_preserve(rows) = 0.75 rows + 0.5

X (p=3, e=2): T = rows = 4  -> 5.0 vs 3.5  -> preserve (swap)
Y (p=15, e=6): T = rows = 20 -> 13.0 vs 15.5 -> recompute
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from policy_helpers import Recorder, decoding_view, state_of

from iterserve.cli.main import main
from iterserve.engine.kv_residency import KvResidency
from iterserve.engine.loop import Engine, bind_policy
from iterserve.kv.config import BlockManagerConfig
from iterserve.plan.builder import PlanBuilder
from iterserve.policies.registry import make_policy
from iterserve.records.plan import IntentKind
from iterserve.records.preemption import PreemptionCostSpec, PreemptionMode
from iterserve.records.spec import Capacity, HiddenTruth, KvSpec, OnlineWorkload, RequestSpec
from iterserve.records.state import CapacityFacts, RunRules
from iterserve.sim.executor import SimulatedExecutor

COSTS = PreemptionCostSpec("linear:2,0.5,0.1", write_bytes_per_s=2e6, read_bytes_per_s=4e6,
                           staging_overhead_ms=0.5, queue_overhead_ms=1.0)
RULES = RunRules(preemption_mode=PreemptionMode.CHEAPER, preemption_cost=COSTS, bytes_per_row=1000)


def test_each_victim_takes_the_mode_its_costs_favour() -> None:
    views = [decoding_view("X", 0, num_prompt=3, num_emitted=2),
             decoding_view("Y", 1, num_prompt=15, num_emitted=6)]
    state = dataclasses.replace(state_of(views, max_num_batched_tokens=64, max_num_seqs=8,
                                         capacity=CapacityFacts(1, 64, 0)), rules=RULES)
    builder = PlanBuilder(make_policy("vllm"), state)
    builder.preempt(state.view("X"))
    builder.preempt(state.view("Y"))
    intents = builder.build().intents
    assert [(i.kind, i.request_id) for i in intents] == [
        (IntentKind.PREEMPT_PRESERVE_EXACT, "X"), (IntentKind.PREEMPT_RECOMPUTE, "Y")]


def test_the_victim_record_keeps_both_costs_and_a_tie_recomputes() -> None:
    views = [decoding_view("A", 0, num_prompt=2, num_emitted=2),
             decoding_view("B", 1, num_prompt=3, num_emitted=2)]
    # B: T = rows = 4: C_recompute = 2 + 2 + 1 = 5.0; C_preserve with 1 ms per row each way
    # and 0 staging... 4 * (0.5 + 0.5) + 1.0 = 5.0: a tie
    tie = dataclasses.replace(COSTS, write_bytes_per_s=2e6, read_bytes_per_s=2e6,
                              staging_overhead_ms=1.0)
    rules = dataclasses.replace(RULES, preemption_cost=tie)
    state = dataclasses.replace(state_of(views, max_num_batched_tokens=16, max_num_seqs=8,
                                         capacity=CapacityFacts(1, 7, 0)), rules=rules)
    plan = make_policy("vllm").choose(state)
    (intent,) = plan.intents
    assert (intent.kind, intent.request_id) == (IntentKind.PREEMPT_RECOMPUTE, "B")
    assert intent.victim is not None
    assert (intent.victim.recompute_ms, intent.victim.preserve_ms) == (5.0, 5.0)
    assert intent.reason.endswith("; c_recompute_ms=5.0, c_preserve_ms=5.0")
    state = dataclasses.replace(state, rules=RULES)  # 5.0 vs 4 * 0.75 + 0.5 = 3.5
    (intent,) = make_policy("vllm").choose(state).intents
    assert intent.kind is IntentKind.PREEMPT_PRESERVE_EXACT


def test_a_cheaper_run_finishes_and_every_mode_is_its_cheaper_cost() -> None:
    requests = tuple(RequestSpec(f"r{i}", float(i), 3 + 4 * i, 12) for i in range(4))
    kv = KvSpec(10, 4, 32, bytes_per_row=1000, preemption_mode=PreemptionMode.CHEAPER,
                preemption_cost=COSTS)
    workload = OnlineWorkload("cheaper", "iteration", Capacity(64, 8), requests, kv=kv)
    policy = make_policy("vllm")
    recorder = Recorder(bind_policy(workload, policy))
    executor = SimulatedExecutor(HiddenTruth({r.request_id: 10 for r in requests}),
                                 kv=KvResidency(BlockManagerConfig(10, 4, 32)), workload=workload)
    engine = Engine(workload, policy, executor, [recorder])
    engine.run(max_iterations=500)
    assert engine.is_done
    preempts = [(state.views[i.request_id], i) for state, plan, _, _ in recorder.steps
                for i in plan.intents if i.victim is not None]
    assert preempts
    for view, intent in preempts:
        target = view.num_prompt_tokens + view.num_emitted - 1 if view.num_emitted \
            else view.num_computed
        recompute = 2 + 0.5 * target + 1.0
        preserve = view.num_computed * 0.75 + 0.5
        assert intent.victim.recompute_ms == pytest.approx(recompute)
        assert intent.victim.preserve_ms == pytest.approx(preserve)
        assert intent.kind is (IntentKind.PREEMPT_PRESERVE_EXACT if preserve < recompute
                               else IntentKind.PREEMPT_RECOMPUTE)


def test_cheaper_without_its_inputs_or_with_a_bad_cost_model_is_refused(tmp_path, capsys) -> None:
    with pytest.raises(ValueError, match="needs kv.preemption_cost"):
        KvSpec(10, 4, 32, bytes_per_row=1000, preemption_mode=PreemptionMode.CHEAPER)
    doc = {"workload_id": "w", "clock": "iteration",
           "capacity": {"max_num_batched_tokens": 64, "max_num_seqs": 8},
           "kv": {"num_kv_blocks": 10, "block_size": 4, "num_host_blocks": 8,
                  "bytes_per_row": 1000, "preemption_mode": "cheaper",
                  "preemption_cost": {"recompute_cost_model": "nonsense:1",
                                      "write_bytes_per_s": 1e6, "read_bytes_per_s": 1e6}},
           "requests": [{"request_id": "a", "arrival": 0, "prompt_tokens": 4,
                         "max_output_tokens": 4}],
           "fixture_only_hidden_truth": {"realized_output_tokens": {"a": 2}}}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    code = main(["simulate", "--workload", str(path), "--policy", "vllm", "--out",
                 str(tmp_path / "o"), "--no-plots"])
    err = capsys.readouterr().err
    assert code == 2 and "recompute_cost_model" in err and len(err.strip().splitlines()) == 1


def test_the_run_rules_round_trip_through_the_workload_header_and_replay(tmp_path) -> None:
    """The decision-log header's workload keeps kv.preemption_cost and
    kv.preservation_fallback, so replay re-derives a cheaper run."""
    from iterserve.engine.decision_log import DecisionLogWriter
    from iterserve.records.preemption import FallbackMode
    from iterserve.records.workload import online_to_json, parse_workload

    requests = tuple(RequestSpec(f"r{i}", float(i), 3 + 4 * i, 12) for i in range(4))
    kv = KvSpec(10, 4, 32, bytes_per_row=1000, preemption_mode=PreemptionMode.CHEAPER,
                preemption_cost=COSTS, preservation_fallback=FallbackMode.REMAIN_SUSPENDED)
    workload = OnlineWorkload("cheaper", "iteration", Capacity(64, 8), requests, kv=kv)
    doc = online_to_json(workload)
    assert doc["kv"]["preservation_fallback"] == "remain_suspended"
    assert parse_workload(json.loads(json.dumps(doc))).online.kv == kv
    policy = make_policy("vllm")
    executor = SimulatedExecutor(HiddenTruth({r.request_id: 10 for r in requests}),
                                 kv=KvResidency(BlockManagerConfig(10, 4, 32)), workload=workload)
    path = tmp_path / "cheaper.jsonl"
    with path.open("w") as stream:
        writer = DecisionLogWriter(stream, bind_policy(workload, policy), executor.capacity())
        Engine(workload, policy, executor, [writer]).run(max_iterations=500)
    assert main(["replay", str(path)]) == 0
