"""One vocabulary from flag to field (records/vocabulary.py): a policy
setting the chosen policy does not take is refused with one line naming it,
in the offline API, ``generate``, ``serve`` and ``simulate``, never dropped;
older names still load, with a warning naming the new one."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from iterserve.cli.main import main
from iterserve.config import EngineConfig
from iterserve.llm import LLM
from iterserve.policies.settings import PolicyConfigError
from iterserve.records.preemption import PreemptionMode
from iterserve.records.vocabulary import RenamedWarning
from iterserve.records.workload import WorkloadError, parse_workload

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_engine_config_refuses_a_setting_the_policy_does_not_take() -> None:
    with pytest.raises(PolicyConfigError, match="'vllm' has no setting 'chunk_size'"):
        EngineConfig(policy="vllm", chunk_size=8)
    with pytest.raises(PolicyConfigError, match="tau"):
        EngineConfig(policy="vllm", tau=4)
    with pytest.raises(PolicyConfigError, match="no policy takes setting 'bogus'"):
        EngineConfig(policy="vllm", extra_policy_settings=(("bogus", 1),))


def test_engine_config_keeps_every_setting_it_is_given() -> None:
    config = EngineConfig(policy="vllm", max_num_seqs=8, long_prefill_token_threshold=12,
                          extra_policy_settings=(("reserve_full_isl", 1),))
    assert config.policy_settings() == {"long_prefill_token_threshold": 12,
                                        "reserve_full_isl": 1, "max_num_seqs": 8}
    assert EngineConfig(policy="sarathi-serve", tau=48).policy_settings() == {
        "tau": 48, "max_num_seqs": 64}
    # a policy with no running cap gets no max_num_seqs setting (it is the capacity's)
    assert EngineConfig(policy="static").policy_settings() == {}
    assert EngineConfig(policy="static").capacity().max_num_seqs == 64


def test_the_offline_api_refuses_before_loading(tmp_path: Path) -> None:
    with pytest.raises(PolicyConfigError, match="chunk_size"):
        LLM(tmp_path / "no-model-needed", policy="vllm", chunk_size=8)


def test_the_offline_api_reads_older_keyword_names_with_a_warning(tmp_path: Path) -> None:
    with pytest.warns(RenamedWarning, match="token_budget"), pytest.raises(PolicyConfigError):
        LLM(tmp_path, token_budget=64, policy="vllm", chunk_size=8)
    with pytest.raises(TypeError, match="one setting"):
        LLM(tmp_path, token_budget=64, max_num_batched_tokens=64)


@pytest.mark.slow
def test_generate_refuses_an_inapplicable_setting(tiny_dir: Path, capsys) -> None:
    code = main(["generate", str(tiny_dir), "--prompt", "hi", "--policy", "vllm",
                 "--chunk-size", "8"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "chunk_size" in err


def test_serve_refuses_an_inapplicable_setting(tmp_path: Path, capsys) -> None:
    code = main(["serve", str(tmp_path), "--policy", "vllm", "--policy-setting", "tau=4"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "tau" in err


def test_serve_takes_a_setting_the_policy_has(tmp_path: Path, capsys) -> None:
    # the flag parses and reaches the config (then the missing model stops it)
    code = main(["serve", str(tmp_path / "missing"), "--policy", "sarathi-serve",
                 "--policy-setting", "tau=64"])
    err = capsys.readouterr().err
    assert code == 2 and "tau" not in err and "partition" not in err


def test_simulate_refuses_an_inapplicable_setting(tmp_path: Path, capsys) -> None:
    code = main(["simulate", "--workload", str(EXAMPLES / "abc_fixture.json"), "--policy",
                 "vllm", "--policy-setting", "chunk_size=8", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "chunk_size" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _small_kv() -> dict:
    return json.loads((EXAMPLES / "small_kv.json").read_text())


def test_older_workload_names_load_as_todays_with_a_warning() -> None:
    new = _small_kv()
    old = copy.deepcopy(new)
    settings = old.pop("policy_settings")
    old["capacity"] = {"token_budget": 128, "sequence_budget": 16, **settings}
    old["kv"]["num_blocks"] = old["kv"].pop("num_kv_blocks")
    old["kv"]["preemption_mode"] = "preserve"
    with pytest.warns(RenamedWarning) as caught:
        upgraded = parse_workload(old).online
    messages = " ".join(str(w.message) for w in caught)
    for name in ("capacity.token_budget", "capacity.sequence_budget", "kv.num_blocks",
                 "'preserve'"):
        assert name in messages
    assert upgraded == parse_workload(new).online
    assert upgraded.kv is not None and upgraded.kv.preemption_mode is PreemptionMode.SWAP
    assert dict(upgraded.policy_settings) == {"max_num_seqs": 16, "tau": 96}


def test_two_spellings_of_one_field_are_refused() -> None:
    doc = _small_kv()
    doc["capacity"]["token_budget"] = 128
    with pytest.raises(WorkloadError, match="capacity.token_budget and "
                                            "capacity.max_num_batched_tokens are one field"):
        parse_workload(doc)


def test_the_cli_names_an_older_field_in_one_line_and_runs(tmp_path: Path, capsys) -> None:
    import warnings

    doc = json.loads((EXAMPLES / "abc_fixture.json").read_text())
    doc["capacity"] = {"token_budget": 2, "sequence_budget": 2}
    (tmp_path / "old.json").write_text(json.dumps(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("always", RenamedWarning)  # the suite makes it an error
        code = main(["simulate", "--workload", str(tmp_path / "old.json"), "--policy", "refill",
                     "--out", str(tmp_path / "out"), "--no-plots"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 0
    assert err == ["iterserve: warning: workload field capacity.token_budget is deprecated; "
                   "write capacity.max_num_batched_tokens",
                   "iterserve: warning: workload field capacity.sequence_budget is deprecated; "
                   "write capacity.max_num_seqs"]
