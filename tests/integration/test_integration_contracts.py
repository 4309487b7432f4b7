"""Cost models, overload gates and the event recorder's clock (0x07)."""

from __future__ import annotations

import dataclasses

import pytest
from integration_helpers import BURST, gate, simulate, two_row_workload

from iterserve.admission.overload import AcceptAll, OverloadConfigError, engine_gate, make_gate
from iterserve.cost import (
    CostModelError,
    FixedIterationCost,
    LinearIterationCost,
    default_cost_model,
    parse_cost_model,
    seconds_per_clock_unit,
)
from iterserve.engine.events import EventRecorder
from iterserve.records.spec import SloTargets


@pytest.mark.parametrize(("spec", "model"), [
    ("fixed:10", FixedIterationCost(10.0)),
    ("fixed:iteration_ms=2.5", FixedIterationCost(2.5)),
    ("linear:5,0.5,1", LinearIterationCost(5.0, 0.5, 1.0)),
    ("linear:per_decode_row_ms=1,base_ms=5,per_prefill_row_ms=0.5",
     LinearIterationCost(5.0, 0.5, 1.0)),
])
def test_cost_model_specs_round_trip(spec, model) -> None:
    parsed = parse_cost_model(spec)
    assert parsed == model and parse_cost_model(parsed.spec) == model
    assert model.model_id.startswith(("fixed-iteration-v1", "linear-iteration-v1"))


@pytest.mark.parametrize("spec", ["", "fixed", "fixed:0", "fixed:-1", "fixed:1,2", "fixed:x",
                                  "linear:1,2", "linear:0,0,0", "linear:a=1,b=2,c=3", "quad:1"])
def test_bad_cost_model_specs_fail_loudly(spec) -> None:
    with pytest.raises(CostModelError):
        parse_cost_model(spec)


def test_linear_cost_charges_rows() -> None:
    model = LinearIterationCost(5.0, 0.5, 1.0)
    assert model.predict_iteration_ms(4, 2) == 9.0
    assert model.predict_iteration_s(4, 2) == pytest.approx(0.009)


def test_clock_scales() -> None:
    assert seconds_per_clock_unit("ms", LinearIterationCost(1, 1, 1)) == 0.001
    assert seconds_per_clock_unit("iteration", default_cost_model("iteration")) == 1.0
    assert seconds_per_clock_unit("iteration", FixedIterationCost(10.0)) == 0.01
    assert default_cost_model("ms") == FixedIterationCost(1.0)
    with pytest.raises(CostModelError, match="iteration clock"):
        seconds_per_clock_unit("iteration", LinearIterationCost(1, 1, 1))


def test_gate_registry_fails_loudly() -> None:
    with pytest.raises(OverloadConfigError, match="accept-all, bounded, slo-feasible"):
        make_gate("shed-load")
    with pytest.raises(OverloadConfigError, match="max_live"):
        make_gate("bounded", {})
    with pytest.raises(OverloadConfigError, match="max_live"):
        make_gate("bounded", {"max_live": True})
    with pytest.raises(OverloadConfigError, match="takes no parameters"):
        make_gate("accept-all", {"max_live": 2})


def test_gates_rebuild_from_their_params() -> None:
    for name, params in (("accept-all", {}), ("bounded", {"max_live": 3}),
                         ("slo-feasible", {"cost_model": "fixed:10", "clock": "ms"})):
        built = make_gate(name, params)
        assert built.gate_id == name and built.params() == params
        assert make_gate(built.gate_id, built.params()) == built
    assert engine_gate(AcceptAll()) is None


def test_slo_feasible_rejects_what_even_the_lower_bound_cannot_serve() -> None:
    """Both arrive at 0 with 2 rows per 10 ms iteration. "ok": 1-row prompt,
    TTFT 30 ms, slack 30 - 10 = 20 ms. "late": 4-row prompt, TTFT 15 ms: its
    prefill needs two iterations, slack 15 - 20 = -5 ms, rejected at arrival."""
    base = two_row_workload([("ok", 0.0), ("late", 0.0)])
    ok, late = base.online.requests
    late = dataclasses.replace(late, num_prompt_tokens=4, slo=SloTargets(ttft_ms=15.0))
    manifest = dataclasses.replace(
        base, online=dataclasses.replace(base.online, requests=(ok, late)))
    run = simulate(manifest, make_gate("slo-feasible", {"cost_model": "fixed:10", "clock": "ms"}))
    assert run.engine.rejected == {"late": "slo_infeasible"}
    assert [e.kind for e in run.recorder.log() if e.request_id == "late"] == ["arrival", "reject"]


def test_recorder_clock_conversion() -> None:
    run = simulate(BURST, gate("accept-all"))
    assert run.recorder.seconds_per_clock_unit == 0.001
    assert max(e.time_s for e in run.recorder.log()) == pytest.approx(0.06)
    assert [it.time_s for it in run.recorder.iterations] == pytest.approx(
        [0.0, 0.01, 0.02, 0.03, 0.04, 0.05])
    with pytest.raises(ValueError):
        EventRecorder(0.0)
