"""Policy settings are validated when the policy is made, naming the field
(issue 9 step 4): unknown setting, wrong type, out of range, missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iterserve.cli.main import main
from iterserve.cost import parse_cost_model
from iterserve.policies.registry import make_policy, policy_for
from iterserve.policies.settings import PolicyConfigError, parse_settings
from iterserve.records.workload import WorkloadError, parse_workload

REPO_ROOT = Path(__file__).resolve().parents[2]

BAD = [
    ("sarathi", {"chunk_size": 0}, "chunk_size"),
    ("sarathi", {"chunk_size": "four"}, "chunk_size"),
    ("sarathi", {}, "chunk_size"),
    ("sarathi-serve", {"tau": 0}, "tau"),
    ("sarathi-serve", {"max_num_seqs": 1.5}, "max_num_seqs"),
    ("vllm", {"long_prefill_token_threshold": -1}, "long_prefill_token_threshold"),
    ("vllm-priority", {"max_num_seqs": 0}, "max_num_seqs"),
    ("orca", {"kv_rows": 0}, "kv_rows"),
    ("orca", {"max_num_seqs": True}, "max_num_seqs"),
    ("edf", {"cost_model": "fast"}, "cost_model"),
    ("least-slack", {"cost_model": 3}, "cost_model"),
    ("static", {"chunk_size": 4}, "chunk_size"),
    ("vllm", {"tau": 4}, "tau"),
]


@pytest.mark.parametrize(("name", "settings", "field"), BAD)
def test_a_bad_setting_fails_at_make_policy_naming_the_field(name, settings, field) -> None:
    with pytest.raises(PolicyConfigError) as info:
        make_policy(name, **settings)
    message = str(info.value)
    assert field in message and name in message and "\n" not in message


def test_good_settings_make_the_policy_with_its_config() -> None:
    policy = make_policy("sarathi", chunk_size=4)
    assert policy.config.chunk_size == 4  # type: ignore[attr-defined]


def test_cli_bad_setting_exits_2_with_one_line(tmp_path, capsys) -> None:
    rc = main(["simulate", "--policy", "sarathi", "--policy-setting", "chunk_size=0",
               "--workload", str(REPO_ROOT / "examples/abc_fixture.json"), "--out", str(tmp_path), "--no-plots"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "chunk_size" in err


def _workload(**extra):
    raw = json.loads((REPO_ROOT / "examples/abc_fixture.json").read_text())
    raw.update(extra)
    return raw


def test_workload_policy_settings_reach_the_policy_and_legacy_knobs_are_read() -> None:
    section = parse_workload(_workload(policy_settings={"chunk_size": 3})).online
    assert policy_for("sarathi", section).config.chunk_size == 3  # type: ignore[attr-defined]
    legacy = _workload()
    legacy["capacity"] = {**legacy["capacity"], "chunk_size": 5, "tau": 2}
    online = parse_workload(legacy).online
    assert dict(online.policy_settings) == {"chunk_size": 5, "tau": 2}
    assert policy_for("sarathi", online).config.chunk_size == 5  # type: ignore[attr-defined]
    assert policy_for("vllm", online).config.max_num_seqs is None  # type: ignore[attr-defined]


def test_a_knob_in_both_places_is_one_error_naming_it() -> None:
    raw = _workload(policy_settings={"chunk_size": 3})
    raw["capacity"] = {**raw["capacity"], "chunk_size": 4}
    with pytest.raises(WorkloadError, match="capacity.chunk_size"):
        parse_workload(raw)


def test_a_setting_no_policy_takes_is_an_error_naming_it() -> None:
    online = parse_workload(_workload(policy_settings={"chunk_sise": 3})).online
    with pytest.raises(PolicyConfigError, match="chunk_sise"):
        policy_for("vllm", online)


def test_cli_flags_override_the_workload_and_a_sweep_ignores_foreign_names() -> None:
    online = parse_workload(_workload(policy_settings={"chunk_size": 3})).online
    policy = policy_for("sarathi", online, parse_settings(["chunk_size=6"]))
    assert policy.config.chunk_size == 6  # type: ignore[attr-defined]
    assert policy_for("vllm", online, {"chunk_size": 6}, strict=False).policy_id == "vllm"
    with pytest.raises(PolicyConfigError, match="chunk_size"):
        policy_for("vllm", online, {"chunk_size": 6})


def test_a_deadline_policy_checks_the_run_clock_when_made() -> None:
    raw = _workload()
    assert raw["clock"] == "iteration"
    linear = parse_cost_model("linear:1,0.1,0.1")
    with pytest.raises(PolicyConfigError, match="fixed-iteration cost model"):
        policy_for("edf", parse_workload(raw).online, cost_model=linear)
