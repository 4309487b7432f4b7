"""0x0E contract records state what the code does (not merely something).

Each expectation comes from the spec or from the policy's code, never from
the contract text itself: the protected identity follows the ordering key
the policy declares; only a policy that reports a service bound may claim
one, and it names the five premises 0x09A lists for VTC's Theorem 4.4; the
spec's negative fixtures (FastServe with a client bound, the completion
adaptation as theorem-preserving, the cache quota as exact Preble,
request-level identity as client fairness) each fail here.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from iterserve.policies.cited import CITED_METHODS
from iterserve.policies.registry import describe_policy, policy_names

CLIENT_KEYS = {"client_counter", "client_done", "client_id"}
RUN_HERE = "simulated or measured here (iterserve); never source-reported"
# VTC Theorem 4.4's premises as 0x09A lists them (one pattern each)
VTC_PREMISES = (r"backlogged", r"lift", r"charg", r"work-conserving", r"no preemption",
                r"L_input", r"\bM\b")


def _text(contract) -> str:
    return " ".join(str(getattr(contract, f.name)) for f in dataclasses.fields(contract))


@pytest.mark.parametrize("name", policy_names())
def test_client_identity_is_claimed_exactly_by_policies_that_order_by_client(name) -> None:
    policy = describe_policy(name)
    orders_by_client = bool(CLIENT_KEYS & set(policy.tie_break_key))
    assert (policy.contract.protected_identity == "client_id") is orders_by_client, (
        name, policy.tie_break_key, policy.contract.protected_identity)


@pytest.mark.parametrize("name", policy_names())
def test_runnable_evidence_is_simulated_or_measured_here(name) -> None:
    contract = describe_policy(name).contract
    assert contract.runnable and not contract.exact_runtime_reproduction
    assert contract.evidence_class == RUN_HERE


@pytest.mark.parametrize("name", sorted(CITED_METHODS))
def test_cited_evidence_is_source_reported_only(name) -> None:
    contract = CITED_METHODS[name]
    assert not contract.runnable
    assert contract.evidence_class.startswith("source-reported only")


@pytest.mark.parametrize("name", policy_names())
def test_a_service_bound_is_claimed_only_with_its_five_premises(name) -> None:
    policy = describe_policy(name)
    contract = policy.contract
    claims_theorem = bool(re.search(r"\b2U\b|Theorem 4\.4|Thm 4\.4", _text(contract)))
    if getattr(policy, "service_bound", None) == "vtc":
        assert claims_theorem
        missing = [p for p in VTC_PREMISES if not re.search(p, contract.premises)]
        assert not missing, (name, missing)
        assert "claims no bound" in contract.non_claims  # outside the premises
    else:
        assert not claims_theorem, name


@pytest.mark.parametrize("name", policy_names())
def test_source_version_names_a_concrete_anchor(name) -> None:
    # a year, a release number or a spec section: what a reader can look up
    version = describe_policy(name).contract.source_version
    assert re.search(r"\b(19|20)\d\d\b|\b\d+\.\d+(\.\d+)?\b|0x[0-9A-F]{2}", version), version


def test_the_spec_negative_fixtures_are_refused() -> None:
    mlfq = describe_policy("mlfq").contract  # FastServe presented with a VTC client bound
    assert mlfq.protected_identity != "client_id"
    assert "no client-service bound" in mlfq.non_claims
    adapted = describe_policy("vtc-completed").contract  # presented as theorem-preserving
    assert "does not transfer" in adapted.premises and "not VTC" in adapted.non_claims
    for name in ("prefix-quota", "prefix-greedy"):  # the teaching quota as exact Preble
        assert "not Preble" in describe_policy(name).contract.non_claims
    least = describe_policy("least-service").contract  # a baseline claiming a bound
    assert "no service-difference bound" in least.non_claims
