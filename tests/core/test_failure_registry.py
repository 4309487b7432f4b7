"""The 0x0E failure registry: fifteen classes, eleven closing earlier
sections' rejection cases (fourteen cited by identity), four new 0x0E
rules; every rejection code belongs to exactly one class, and each place
that reports a failure names its class."""

from __future__ import annotations

import dataclasses
import inspect
from types import SimpleNamespace

import pytest

import iterserve.records.errors as errors
from iterserve.cli import main as cli_main
from iterserve.cli import policies as cli_policies
from iterserve.lab.sensitivity import BASE, one_control
from iterserve.policies.registry import make_policy
from iterserve.policies.settings import PolicyConfigError
from iterserve.policies.starvation_guard import check_composition
from iterserve.records.failures import (
    FAILURE_CLASSES,
    FailureBoundary,
    UnknownFailureEvidence,
    failure_label,
    failure_of,
)

VIOLATION_CODES = {cls.code for _, cls in inspect.getmembers(errors, inspect.isclass)
                   if issubclass(cls, errors.ContractViolation)
                   and cls is not errors.ContractViolation}


def test_fifteen_classes_eleven_prior_with_fourteen_cited_cases_and_four_new_rules() -> None:
    assert [f.failure_id for f in FAILURE_CLASSES] == [f"FC{i:02d}" for i in range(1, 16)]
    prior = [f for f in FAILURE_CLASSES if not f.is_new_in_0x0e]
    new = [f for f in FAILURE_CLASSES if f.is_new_in_0x0e]
    assert (len(prior), len(new)) == (11, 4)
    cited = [code for f in prior for code in f.evidence]
    assert len(cited) == len(set(cited)) == 14
    assert all(f.evidence and set(f.evidence) <= set(f.codes) for f in prior)
    assert all(not f.evidence and f.boundary is FailureBoundary.COMPARISON for f in new)
    assert len({f.name for f in FAILURE_CLASSES}) == 15
    assert all(f.meaning and f.sections and f.enforced_by for f in FAILURE_CLASSES)


def test_every_contract_violation_code_belongs_to_exactly_one_class() -> None:
    assert len(VIOLATION_CODES) == 32  # the subclasses of records.errors, counted by hand
    listed = [code for f in FAILURE_CLASSES if not f.is_new_in_0x0e for code in f.codes]
    assert sorted(listed) == sorted(VIOLATION_CODES)  # none missing, none twice, none invented


@pytest.mark.parametrize(("code", "failure_id", "boundary"), [
    ("not_ready", "FC07", FailureBoundary.FOREIGN_OWNER),  # the scheduler cannot repair it
    ("kv_capacity_exceeded", "FC05", FailureBoundary.KV_BUDGET),
    ("multi_row_decode", "FC02", FailureBoundary.RECORDS),
    ("service_debit_mismatch", "FC11", FailureBoundary.FAIRNESS),
    ("wrong_output_clock", "FC10", FailureBoundary.METRICS),
    ("incomparable_pair", "FC12", FailureBoundary.COMPARISON),
])
def test_owners_as_0x0f_assigns_them(code, failure_id, boundary) -> None:
    failure = failure_of(code)
    assert (failure.failure_id, failure.boundary) == (failure_id, boundary)


def test_unknown_failure_evidence_is_refused() -> None:
    with pytest.raises(UnknownFailureEvidence, match="no_such_code"):
        failure_of("no_such_code")
    assert failure_label("contract_violation") == "contract_violation"  # the base names no class


def test_the_cli_names_the_class_of_a_contract_violation(monkeypatch, capsys) -> None:
    def broken(args) -> int:
        raise errors.IntervalBeforeFrontier("decision 3: request a starts at 2, frontier 4")

    monkeypatch.setattr(cli_policies, "run", broken)
    assert cli_main.main(["policies"]) == 2
    err = capsys.readouterr().err
    assert err == ("iterserve policies: error: FC02 illegal-interval: decision 3: request a "
                   "starts at 2, frontier 4\n")


def test_a_composition_keeping_the_inner_identity_is_refused() -> None:
    inner = make_policy("priority")
    kept = SimpleNamespace(policy_id="priority", policy_version="1+guard.1",
                           contract=dataclasses.replace(inner.contract, premises="none"))
    with pytest.raises(PolicyConfigError, match="FC14 theorem-transfer: .* keeps the inner "
                                                "policy's id"):
        check_composition(inner, kept)


def test_a_compound_sensitivity_case_is_refused() -> None:
    assert one_control(BASE, dataclasses.replace(BASE, chunk_size=2)) == "chunk_size"
    with pytest.raises(ValueError, match="FC15 compound-sensitivity.*chunk_size.*max_num_seqs"):
        one_control(BASE, dataclasses.replace(BASE, chunk_size=2, max_num_seqs=3))
    with pytest.raises(ValueError, match="FC15"):
        one_control(BASE, BASE)


def test_the_documented_table_lists_every_class() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "failures-and-layers.md").read_text()
    for failure in FAILURE_CLASSES:
        assert f"| {failure.failure_id} | {failure.name} |" in text, failure.failure_id
