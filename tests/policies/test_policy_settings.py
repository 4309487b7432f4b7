"""Policy settings are validated when the policy is made, naming the field
(issue 9 step 4): unknown setting, wrong type, out of range, missing."""

from __future__ import annotations

import pytest

from iterserve.cli.main import main
from iterserve.policies.registry import make_policy
from iterserve.policies.settings import PolicyConfigError

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
               "--workload", "examples/abc_fixture.json", "--out", str(tmp_path), "--no-plots"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "chunk_size" in err
