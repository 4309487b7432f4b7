"""The 0x06 Loop 5 fixture ("One Hidden-Truth Policy Replay"), reproduced exactly.

The spec lost the request table; ``fixtures/admission_0x06.json`` holds the
smallest table from which every stated fact follows (its ``derivation`` says
why). Online plans are built from the candidate columns only; the hidden
column reaches the evaluator after every plan is frozen.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from iterserve.admission import (
    AdmissionCandidate,
    AdmissionDecision,
    AdmissionPlan,
    AdmissionPolicyConfig,
    OutputForecast,
    PolicyEvaluation,
    QuantileForecast,
    ReservationBudget,
    build_admission_policy,
    evaluate_plan,
    plan_admission,
    soft_ceiling_rows,
)
from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.policies.registry import make_policy
from iterserve.records import codec
from iterserve.records.workload import WorkloadError, parse_workload
from iterserve.sim.factory import make_simulated_executor

FIXTURE = Path(__file__).parent / "fixtures" / "admission_0x06.json"
SMALL_KV = Path(__file__).resolve().parents[2] / "examples" / "small_kv.json"
KIB = 1024
MIB = 1024 * KIB
ONLINE_FIELDS = {"request_id", "generation", "priority", "prompt_rows", "uncached_prompt_rows",
                 "emitted_outputs", "max_tokens", "forecast"}


def _load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    return data


def online_candidates(rows: list[dict[str, Any]]) -> tuple[AdmissionCandidate, ...]:
    """Build candidates from online columns only; any other column is a leak."""
    candidates = []
    for row in rows:
        extra = set(row) - ONLINE_FIELDS
        if extra:
            raise ValueError(f"non-online columns in candidate row: {sorted(extra)}")
        forecast = row["forecast"]
        quantiles = tuple(QuantileForecast(q["quantile"], q["total_outputs"])
                          for q in forecast["quantiles"])
        fields = {k: v for k, v in row.items() if k != "forecast"}
        candidates.append(AdmissionCandidate(**fields, forecast=OutputForecast(
            forecast["prediction_version"], forecast["point_total_outputs"], quantiles)))
    return tuple(candidates)


def _budget(data: Mapping[str, Any]) -> ReservationBudget:
    return ReservationBudget(bytes_per_row=data["abi"]["bytes_per_row"], **data["budget"])


def _plans(data: Mapping[str, Any]) -> dict[str, AdmissionPlan]:
    candidates = online_candidates(data["requests"])  # hidden truth never read here
    return {name: plan_admission(candidates, build_admission_policy(AdmissionPolicyConfig(**cfg)),
                                 _budget(data))
            for name, cfg in data["policies"].items()}


def _evaluations(data: Mapping[str, Any]) -> dict[str, PolicyEvaluation]:
    plans = _plans(data)  # frozen before the truth is revealed
    realized = data["fixture_only_hidden_truth"]["realized_total_outputs"]
    candidates = online_candidates(data["requests"])
    return {name: evaluate_plan(plan, candidates, realized, data["abi"]["bytes_per_row"])
            for name, plan in plans.items()}


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return _load()


@pytest.fixture(scope="module")
def evaluations(data: dict[str, Any]) -> dict[str, PolicyEvaluation]:
    return _evaluations(data)


def test_ledger_matches_the_spec_text(data: dict[str, Any]) -> None:
    """8 used rows, hard 28 = 3.5 MiB, watermark 4 = 0.5 MiB, soft 24 = 3.0 MiB at 128 KiB/row."""
    row = data["abi"]["bytes_per_row"]
    assert row == 128 * KIB
    budget = _budget(data)
    assert budget.reserved_rows == 8
    assert sum(c.committed_rows for c in online_candidates(data["requests"])) == 8
    assert all(c.emitted_outputs == 1 for c in online_candidates(data["requests"]))
    soft = soft_ceiling_rows(budget.hard_ceiling_rows, data["watermark_rows"])
    assert (budget.hard_ceiling_rows, soft) == (28, 24)
    assert budget.hard_ceiling_rows * row == 3.5 * MIB
    assert data["watermark_rows"] * row == 0.5 * MIB
    assert soft * row == 3.0 * MIB
    expected = data["expected"]
    assert expected["hard_ceiling"] == {"rows": 28, "bytes": int(3.5 * MIB)}
    assert expected["soft_ceiling"] == {"rows": 24, "bytes": 3 * MIB}
    assert expected["watermark"] == {"rows": 4, "bytes": MIB // 2}


@pytest.mark.parametrize("name", ["maximum", "point", "p90", "watermark"])
def test_every_policy_fact_from_the_code_path(data: dict[str, Any],
                                              evaluations: dict[str, PolicyEvaluation],
                                              name: str) -> None:
    expected = data["expected"]["policies"][name]
    result = evaluations[name]
    assert result.policy_id == expected["policy_id"]
    assert list(result.admitted) == expected["admitted"]
    assert list(result.rejected) == expected["rejected"]
    assert result.reserved_rows == expected["reserved_rows"]
    assert result.realized_rows == expected["realized_rows"]
    for field in ("over_reservation", "under_reservation", "hard_breach", "extension"):
        amount = getattr(result, field)
        assert {"rows": amount.rows, "bytes": amount.num_bytes} == expected[field], field
    assert [c.label for c in result.preemption_candidates] == expected["preemption_candidates"]


def test_maximum_leaves_five_rows_unused(evaluations: dict[str, PolicyEvaluation]) -> None:
    result = evaluations["maximum"]
    assert result.over_reservation.rows == 5 and result.over_reservation.num_bytes == 640 * KIB
    assert result.rejected == ("C:0",) and result.hard_breach.rows == 0


def test_point_and_p90_underestimate(evaluations: dict[str, PolicyEvaluation]) -> None:
    assert evaluations["point"].under_reservation.rows == 11
    assert evaluations["point"].under_reservation.num_bytes == 1.375 * MIB
    assert evaluations["p90"].under_reservation.rows == 3
    assert evaluations["p90"].under_reservation.num_bytes == 384 * KIB


def test_optimistic_and_p90_breach_and_name_c0(evaluations: dict[str, PolicyEvaluation]) -> None:
    for name in ("point", "p90"):
        result = evaluations[name]
        assert result.realized_rows == 29
        assert result.hard_breach.rows == 1 and result.hard_breach.num_bytes == 128 * KIB
        (victim,) = result.preemption_candidates
        assert victim.label == "C:0"
        inputs = dict(victim.score_inputs)
        assert inputs["priority"] == 1  # the lowest priority admitted
        assert inputs["admission_position"] == 2
        assert inputs["realized_footprint_rows"] == 9 >= result.hard_breach.rows
        assert "priority ascending" in victim.tie_break
        assert not result.extends_without_victim


def test_watermark_extends_without_victim(evaluations: dict[str, PolicyEvaluation]) -> None:
    result = evaluations["watermark"]
    assert result.reserved_rows == 21 and result.realized_rows == 22
    assert result.under_reservation.rows == 1 and result.extension.rows == 1
    assert result.realized_rows <= 24 <= 28
    assert result.extends_without_victim and result.preemption_candidates == ()


def test_plans_are_intents_without_physical_results(data: dict[str, Any]) -> None:
    for plan in _plans(data).values():
        for intent in plan.intents:
            request = intent.allocation_request
            if intent.decision is AdmissionDecision.ADMIT:
                assert request is not None
                assert request.requested_append_rows == intent.estimate.estimated_append_rows
                assert request.requested_append_bytes == request.requested_append_rows * 128 * KIB
                assert request.allocation_epoch == plan.allocation_epoch
            else:
                assert request is None


class _PlanRecorder(EngineObserver):
    def __init__(self) -> None:
        self.steps: list[tuple[bytes, bytes]] = []

    def on_step(self, state, plan, result, successor) -> None:  # noqa: ANN001
        self.steps.append((codec.dumps(codec.plan_to_json(plan)).encode(),
                           codec.dumps(codec.result_to_json(result)).encode()))


def _run_small_kv(admission: str, lengths: Mapping[str, int] | None) -> list[tuple[bytes, bytes]]:
    """examples/small_kv.json through the loader, the real engine (every policy
    screens admissions by ``kv.admission``) and the simulated executor, which
    holds the hidden truth: the only place a leak could come from."""
    raw = json.loads(SMALL_KV.read_text())
    raw["kv"] |= {"admission": admission, "preemption_mode": "recompute"}
    if lengths is not None:
        raw["fixture_only_hidden_truth"]["realized_output_tokens"] = dict(lengths)
    manifest = parse_workload(raw)
    recorder = _PlanRecorder()
    Engine(manifest.online_projection(), make_policy("sarathi-serve"),
           make_simulated_executor(manifest), [recorder]).run()
    return recorder.steps


@pytest.mark.parametrize("admission", ["max", "point", "quantile", "watermark:8"])
def test_metamorphic_hidden_truth_never_changes_a_plan(data: dict[str, Any], admission: str) -> None:
    """Changing every realized length leaves every plan byte-for-byte unchanged
    until a result the changed truth produced is published; the runs differ
    after that, so the comparison has something to find."""
    realized = json.loads(SMALL_KV.read_text())["fixture_only_hidden_truth"][
        "realized_output_tokens"]
    declared = _run_small_kv(admission, None)
    altered = _run_small_kv(admission, {rid: 1 + (n * 7) % 13 for rid, n in realized.items()})
    first_difference = next(i for i, (a, b) in enumerate(zip(declared, altered, strict=False))
                            if a[1] != b[1])
    assert first_difference > 0
    for i in range(first_difference + 1):
        assert declared[i][0] == altered[i][0], f"plan {i} moved before any result differed"
    assert declared != altered
    changed = json.loads(json.dumps(data))
    changed["fixture_only_hidden_truth"]["realized_total_outputs"] = {"A": 1, "B": 12, "C": 3}
    assert _evaluations(changed) != _evaluations(data)  # only the hindsight scores move


@pytest.mark.parametrize("column", [("realized_output_tokens", 8), ("realized_total_outputs", 8),
                                    ("block_ids", [0, 1])], ids=lambda c: c[0])
def test_hidden_truth_column_is_refused_online(data: dict[str, Any], column) -> None:
    """A hidden-truth or physical column is refused where a user hands it in:
    the workload loader names it, and the online candidate record has no slot
    for it (the engine builds candidates only from the online workload)."""
    name, value = column
    raw = json.loads(SMALL_KV.read_text())
    raw["requests"][3][name] = value
    with pytest.raises(WorkloadError, match=rf"requests\[3\]\.{name}: unknown field"):
        parse_workload(raw)
    candidate = online_candidates(data["requests"])[0]
    online = {field: getattr(candidate, field) for field in AdmissionCandidate.__slots__}
    with pytest.raises(TypeError, match=name):
        AdmissionCandidate(**online, **{name: value})
    assert "realized" not in " ".join(AdmissionCandidate.__slots__)
    leaked = [dict(r, **{name: value}) for r in data["requests"]]
    with pytest.raises(ValueError, match="non-online"):
        online_candidates(leaked)  # the fixture's own reader refuses it too
