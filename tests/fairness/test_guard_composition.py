"""A guard that changes decisions is a new contract (0x0E): the composition
``priority+starvation-guard`` names itself, at its own version, in the run's
binding, on every plan (fired or not) and in the decision log; its contract
says what the guard adds and that the inner policy's premises do not
transfer; replay rebuilds it from the log."""

from __future__ import annotations

import dataclasses
import json

from fairness_helpers import request, simulate, workload

from iterserve.cli.main import main
from iterserve.policies.registry import make_policy
from iterserve.policies.starvation_guard import StarvationGuard, inner_identity


def _aging_trace() -> dict:
    """A low request (priority 4) at tick 0, one high request (priority 0) every tick."""
    requests = [request("low", "low", priority=4)]
    requests += [request(f"high{t:02d}", "high", arrival=t, priority=0) for t in range(8)]
    return workload("guard-identity", requests)


def test_the_composition_has_its_own_id_version_and_contract() -> None:
    inner = make_policy("priority")
    guard = StarvationGuard(inner, 4)
    assert (guard.policy_id, guard.policy_version) == ("priority+starvation-guard", "1+guard.1")
    assert inner_identity(guard.policy_id, guard.policy_version) == ("priority", "1")
    assert inner_identity("priority", "1") is None
    contract, base = guard.contract, inner.contract
    changed = {f.name for f in dataclasses.fields(contract)
               if getattr(contract, f.name) != getattr(base, f.name)}
    assert changed >= {"protected_identity", "visible_state", "decision_output", "objective",
                       "metric", "assumptions", "premises", "source", "source_version",
                       "non_claims"}
    assert contract.premises.startswith("none transferred")
    assert "horizon 4 clock units" in contract.assumptions
    assert contract.source.startswith("composition (0x0E) of priority (")
    assert "source-reported" not in contract.evidence_class.replace("never source-reported", "")
    assert contract.granularity == base.granularity  # the decision unit is unchanged


def test_every_plan_of_a_guarded_run_names_the_composition(tmp_path) -> None:
    log = tmp_path / "guarded.jsonl"
    report = simulate(tmp_path, _aging_trace(), "priority", "--starvation-horizon", "4",
                      "--decision-log", str(log))
    assert report["fairness"]["starvation_guard"]["num_fired"] == 1
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    header, decisions = lines[0], [line for line in lines if "policy" in line][1:]
    assert header["policy"] == {"id": "priority+starvation-guard", "version": "1+guard.1"}
    assert len(decisions) >= 9  # fired once, the others unforced: all are the composition's
    assert {(d["policy"]["id"], d["policy"]["version"]) for d in decisions} == {
        ("priority+starvation-guard", "1+guard.1")}
    assert main(["replay", str(log)]) == 0


def test_an_unguarded_run_keeps_the_inner_identity(tmp_path) -> None:
    log = tmp_path / "plain.jsonl"
    simulate(tmp_path, _aging_trace(), "priority", "--decision-log", str(log))
    header = json.loads(log.read_text().splitlines()[0])
    assert header["policy"] == {"id": "priority", "version": "1"}
