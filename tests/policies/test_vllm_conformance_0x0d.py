"""0x0D, the vLLM-shaped policies: SchedulerConfig-style cross-field
rules (one error per rule), ``reserve_full_isl`` (vLLM 0.32's
``scheduler_reserve_full_isl``, on by default), and the six-policy x
four-snapshot decision matrix."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from decision_matrix_0x0d import POLICIES, decision_matrix
from decision_matrix_oracle_0x0d import ORACLE, expected_matrix
from policy_helpers import choose_validated, state_of, waiting_view, workload_for

from iterserve.cli.main import main
from iterserve.policies.registry import describe_policy, make_policy
from iterserve.policies.settings import PolicyConfigError
from iterserve.records.plan import IntentKind
from iterserve.records.spec import Capacity
from iterserve.records.state import CapacityFacts
from iterserve.records.view import Lifecycle


# --- cross-field rules ------------------------------------------------------------------------
@pytest.mark.parametrize(("policy", "settings", "message"), [
    ("vllm", {"max_num_batched_tokens": 4, "max_num_seqs": 8},
     "rule SC1: max_num_batched_tokens (4) must be >= max_num_seqs (8)"),
    ("vllm-priority", {"max_num_batched_tokens": 4, "max_num_seqs": 8},
     "rule SC1: max_num_batched_tokens (4) must be >= max_num_seqs (8)"),
    ("vllm", {"max_num_partial_prefills": 2, "enable_chunked_prefill": 0,
              "long_prefill_token_threshold": 8},
     "rule SC2: max_num_partial_prefills (2) > 1 requires enable_chunked_prefill=1 (got 0)"),
    ("vllm", {"long_prefill_token_threshold": 64, "max_model_len": 32},
     "rule SC3: long_prefill_token_threshold (64) cannot exceed max_model_len (32)"),
    ("vllm-priority", {"long_prefill_token_threshold": 33, "max_model_len": 32},
     "rule SC3: long_prefill_token_threshold (33) cannot exceed max_model_len (32)"),
    ("vllm", {"enable_chunked_prefill": 0, "max_num_batched_tokens": 16, "max_model_len": 32},
     "rule SC4: enable_chunked_prefill=0 needs max_num_batched_tokens (16) >= max_model_len (32)"),
    ("vllm", {"reserve_full_isl": 2}, "setting reserve_full_isl: must be 0 (off) or 1 (on)"),
])
def test_each_cross_field_rule_has_its_own_one_line_error(policy, settings, message) -> None:
    with pytest.raises(PolicyConfigError) as caught:
        make_policy(policy, **settings)
    text = str(caught.value)
    assert text.startswith(f"policy {policy!r} {message}") and "\n" not in text


@pytest.mark.parametrize("settings", [
    {"max_num_batched_tokens": 8, "max_num_seqs": 8},  # SC1 at its edge
    {"max_num_partial_prefills": 2, "enable_chunked_prefill": 1, "max_model_len": 100},
    {"max_num_partial_prefills": 1, "enable_chunked_prefill": 0},  # SC2 binds only above 1
    {"long_prefill_token_threshold": 32, "max_model_len": 32},  # SC3 at its edge
    {"long_prefill_token_threshold": 64, "max_num_batched_tokens": 32},  # vLLM accepts it too
    {"enable_chunked_prefill": 0, "max_num_batched_tokens": 32, "max_model_len": 32},
    {"max_num_seqs": 8},  # a rule relating an unset field is not checked
    {"reserve_full_isl": 0},
])
def test_settings_that_keep_every_rule_are_accepted(settings) -> None:
    assert make_policy("vllm", **settings).config == type(make_policy("vllm").config)(**settings)


def test_a_broken_rule_is_exit_2_and_one_line_from_the_cli(tmp_path, capsys) -> None:
    workload = Path(__file__).resolve().parents[2] / "examples" / "burst_0x07.json"
    code = main(["simulate", "--workload", str(workload), "--policy", "vllm", "--out",
                 str(tmp_path / "o"), "--no-plots", "--policy-setting", "max_num_batched_tokens=1",
                 "--policy-setting", "max_num_seqs=2"])
    err = capsys.readouterr().err
    assert code == 2 and "rule SC1" in err and len(err.strip().splitlines()) == 1


def test_max_num_batched_tokens_tightens_the_token_budget() -> None:
    views = [waiting_view("W", 0, num_prompt=10)]
    state = state_of(views, max_num_batched_tokens=16, max_num_seqs=4)
    _, plan = choose_validated(make_policy("vllm", max_num_batched_tokens=3), workload_for(
        state, Capacity(max_num_batched_tokens=16, max_num_seqs=4)), state)
    assert [(w.start, w.end) for w in plan.work] == [(0, 3)] and plan.tokens_used == 3


# --- R1: reserve_full_isl -------------------------------------------------------------------------
def full_isl_state(num_emitted: int = 0):
    """Four free rows; a waiting request whose first chunk (3 rows, the
    threshold) fits but whose whole sequence (6 rows) does not."""
    view = waiting_view("W", 0, num_prompt=6)
    if num_emitted:  # a recompute-preempted request: computed 0, outputs kept
        view = view._replace(num_emitted=num_emitted, snapshot_version=2)
    facts = CapacityFacts(block_size=1, num_blocks_total=8, num_blocks_free=4)
    state = state_of([view], max_num_batched_tokens=16, max_num_seqs=4, capacity=facts)
    return state, workload_for(state, Capacity(max_num_batched_tokens=16, max_num_seqs=4))


@pytest.mark.parametrize("policy", ["vllm", "vllm-priority"])
def test_reserve_full_isl_admits_only_when_the_whole_sequence_fits(policy) -> None:
    state, workload = full_isl_state()
    # the threshold binds a lone request only when asked to (vLLM never)
    lone = {"long_prefill_token_threshold": 3, "long_prefill_token_threshold_caps_lone_request": 1}
    _, first_chunk = choose_validated(make_policy(policy, reserve_full_isl=0, **lone),
                                      workload, state)
    assert [(w.request_id, w.start, w.end) for w in first_chunk.work] == [("W", 0, 3)]
    for full_isl in ({"reserve_full_isl": 1}, {}):  # on by default, as vLLM 0.32's
        _, full = choose_validated(make_policy(policy, **lone, **full_isl), workload, state)
        assert full.work == () and full.intents == ()


def test_reserve_full_isl_counts_a_resumed_requests_outputs() -> None:
    state, workload = full_isl_state(num_emitted=2)
    assert state.view("W").lifecycle is Lifecycle.WAITING
    roomy = dataclasses.replace(state, capacity=CapacityFacts(block_size=1, num_blocks_total=16,
                                                              num_blocks_free=7))
    policy = make_policy("vllm", long_prefill_token_threshold=3)
    _, plan = choose_validated(policy, workload, roomy)  # p + e = 8 rows > 7 free
    assert plan.work == ()
    fits = dataclasses.replace(roomy, capacity=CapacityFacts(block_size=1, num_blocks_total=16,
                                                             num_blocks_free=8))
    _, plan = choose_validated(policy, workload, fits)
    assert (IntentKind.ADMIT, "W") in [(i.kind, i.request_id) for i in plan.intents]


def test_reserve_full_isl_still_aborts_a_request_that_can_never_fit() -> None:
    view = waiting_view("W", 0, num_prompt=12)
    facts = CapacityFacts(block_size=1, num_blocks_total=8, num_blocks_free=8)
    state = state_of([view], max_num_batched_tokens=16, max_num_seqs=4, capacity=facts)
    workload = workload_for(state, Capacity(max_num_batched_tokens=16, max_num_seqs=4))
    policy = make_policy("vllm", long_prefill_token_threshold=3)
    _, plan = choose_validated(policy, workload, state)
    assert [(i.kind, i.request_id) for i in plan.intents] == [(IntentKind.ABORT, "W")]


# --- the six-policy x four-snapshot matrix --------------------------------------------------------
@pytest.mark.parametrize("snapshot", sorted(ORACLE))
def test_each_policy_decides_what_its_rule_gives_by_hand(snapshot) -> None:
    got = decision_matrix()[snapshot]
    assert set(got) == set(POLICIES) == set(ORACLE[snapshot])
    for policy, cell in ORACLE[snapshot].items():
        assert got[policy] == cell["expected"], f"{snapshot} {policy}: {cell['why']}"


def test_the_oracle_covers_six_policies_on_four_snapshots() -> None:
    assert len(POLICIES) == 6 and len(expected_matrix()) == 4
    assert set(decision_matrix()) == set(expected_matrix())


def test_every_snapshot_activates_a_policy_difference_and_every_pair_differs_somewhere() -> None:
    matrix = decision_matrix()
    for name, row in matrix.items():
        assert len({json.dumps(cell, sort_keys=True) for cell in row.values()}) >= 2, name
    names = list(POLICIES)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert any(row[a] != row[b] for row in matrix.values()), (a, b)


def test_the_0x0d_source_shaped_preemption_cells() -> None:
    row = decision_matrix()["S2_kv_exhausted_priority"]
    assert row["vllm"]["intents"] == [["preempt_recompute", "B"]]
    assert row["vllm"]["work"] == [["A", 3, 4, "DECODE_ROW"]]
    assert row["vllm-priority"] == {"work": [], "intents": [["preempt_recompute", "A"]],
                                    "tokens_used": 0, "sequences_used": 0}


@pytest.mark.parametrize("name", list(POLICIES))
def test_matrix_policies_declare_no_exact_reproduction_an_evidence_basis_and_a_tie_break(name):
    policy = describe_policy(name)
    assert policy.contract.exact_runtime_reproduction is False
    assert policy.contract.source and policy.contract.evidence_class
    assert policy.tie_break_key and policy.tie_break_key[-2:] == ("request_id",
                                                                  "request_generation")
