"""``iterserve policies`` and the registry's loud failures (STYLE habit 7,
0x0E contract records)."""

from __future__ import annotations

import dataclasses

import pytest
from policy_helpers import write_workload

from iterserve.cli.main import main
from iterserve.plan import PolicyContract
from iterserve.policies.registry import POLICIES, describe_policy, policy_names

CONTRACT_FIELDS = [field.name for field in dataclasses.fields(PolicyContract)]


def listing_blocks(text: str) -> dict[str, list[str]]:
    """policy header -> its indented contract lines."""
    blocks: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(" "):
            assert current is not None, f"contract line before any policy: {line!r}"
            blocks[current].append(line.strip())
        elif line:
            current = line.split()[0]
            blocks[current] = []
    return blocks


def test_listing_names_every_registered_policy_with_its_full_contract(capsys) -> None:
    assert main(["policies"]) == 0
    blocks = listing_blocks(capsys.readouterr().out)
    expected = {}
    for name in policy_names():
        policy = describe_policy(name)
        assert policy.policy_id == name
        expected[f"{policy.policy_id}@{policy.policy_version}"] = [
            f"{field}: {getattr(policy.contract, field)}" for field in CONTRACT_FIELDS]
        assert all(getattr(policy.contract, field) != "" for field in CONTRACT_FIELDS), name
    assert blocks == expected
    assert set(POLICIES) == {header.split("@")[0] for header in blocks}
    # 0x0E: no policy claims exact runtime reproduction, as the listing itself says
    # (test_no_policy_claims_exact_runtime_reproduction checked the same default
    # without the CLI; it is folded in here)
    for header, lines in blocks.items():
        assert "exact_runtime_reproduction: False" in lines, header


def test_listing_one_policy(capsys) -> None:
    assert main(["policies", "vllm-priority"]) == 0
    assert list(listing_blocks(capsys.readouterr().out)) == ["vllm-priority@1"]


def tiny_workload(tmp_path, **knobs: int):
    return write_workload(
        tmp_path / "tiny.json",
        [{"request_id": "a", "arrival": 0, "prompt_tokens": 3, "max_output_tokens": 2}],
        {"max_num_batched_tokens": 8, "max_num_seqs": 2, **knobs},
    )


@pytest.mark.parametrize("argv_tail", [["policies", "fcfs"], ["simulate", "--policy", "fcfs"]])
def test_unknown_policy_exits_2_listing_the_valid_ones(tmp_path, capsys, argv_tail) -> None:
    argv = list(argv_tail)
    if argv[0] == "simulate":
        argv += ["--workload", str(tiny_workload(tmp_path)), "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1, err
    assert "unknown policy 'fcfs'" in err
    for name in policy_names():
        assert name in err
    assert not (tmp_path / "out").exists()


def test_policy_missing_its_knob_exits_2_naming_it(tmp_path, capsys) -> None:
    argv = ["simulate", "--workload", str(tiny_workload(tmp_path)), "--policy", "sarathi",
            "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "capacity.chunk_size" in err and "sarathi" in err
    assert "Traceback" not in err


def test_the_same_workload_runs_once_the_knob_is_set(tmp_path, capsys) -> None:
    argv = ["simulate", "--workload", str(tiny_workload(tmp_path, chunk_size=2)),
            "--policy", "sarathi", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    assert (tmp_path / "out" / "report.json").exists()


# --- 0x0E: the K_m fields beyond the mechanism, and the cited methods not run -------------
K_M_EXTRA_FIELDS = ("denominator", "premises", "evidence_class", "source_version", "non_claims")


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_declares_denominator_premises_evidence_version_non_claims(name) -> None:
    """Present and distinct (one line pasted into every field fails); what
    they must say is checked against the code and the spec in
    test_contract_claims.py."""
    contract = describe_policy(name).contract
    values = [getattr(contract, field).strip() for field in K_M_EXTRA_FIELDS]
    assert all(values), name
    assert len(set(values)) == len(values), name
    assert contract.runnable is True


def test_cited_methods_are_listed_marked_not_runnable_and_cannot_be_made(capsys) -> None:
    from iterserve.policies.cited import CITED_METHODS
    from iterserve.policies.registry import UnknownPolicy, make_policy

    assert main(["policies", "--cited"]) == 0
    blocks = listing_blocks(capsys.readouterr().out)
    assert set(blocks) == {"preble", "layerkv", "distserve"} == set(CITED_METHODS)
    for name, lines in blocks.items():
        assert "runnable: False" in lines
        contract = CITED_METHODS[name]
        assert all(getattr(contract, field) != "" for field in CONTRACT_FIELDS)
        with pytest.raises(UnknownPolicy):
            make_policy(name)


def test_a_contract_flag_must_be_true_or_false() -> None:
    with pytest.raises(ValueError, match="runnable: True or False"):
        PolicyContract.parse("objective: x\nrunnable: maybe")
