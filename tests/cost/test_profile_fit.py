"""The profile's fit form (issue 15, fidelity): decode attention priced apart
from prefill attention, and each iteration's aftermath (billed by the
executor to the next iteration) fitted and handed back to the iteration that
causes it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from iterserve.cost import (
    BatchShape,
    ClockedCost,
    ProfiledIterationCost,
    batch_shape,
    parse_cost_model,
)
from iterserve.cost.fit import CARRIED, MeasuredIteration, fit_profile, speed_factor
from iterserve.cost.profiled import FEATURES, feature_values
from iterserve.records.plan import IterationPlan, WorkItem
from iterserve.records.state import SchedulerState
from iterserve.records.view import WorkKind

COORDS = (("config_hash", "cd" * 32), ("dtype", "float32"), ("num_threads", "1"),
          ("torch_version", "2.x"), ("cpu_model", "test cpu"), ("machine", "test"))
OWN_MS = (1.5, 0.02, 0.1, 5e-5, 0.2, 0.8, 2e-3)  # intercept, then FEATURES order
CARRY_MS = {"num_prefill_rows": 3e-3, "num_sequences": 0.05}


def _own_ms(shape: BatchShape) -> float:
    return OWN_MS[0] + sum(c * x for c, x in zip(OWN_MS[1:], feature_values(shape), strict=True))


def _carry_ms(shape: BatchShape | None) -> float:
    if shape is None:
        return 0.0
    values = dict(zip(FEATURES, feature_values(shape), strict=True))
    return sum(c * values[name] for name, c in CARRY_MS.items())


def _shape(rng: random.Random) -> BatchShape:
    decode = rng.randint(0, 16)
    prefill = rng.choice([0, 0, rng.randint(1, 512)])
    if not (decode or prefill):
        decode = 1
    context = sum(rng.randint(16, 500) for _ in range(decode))
    attended = context + prefill * rng.randint(prefill, prefill + 200)
    return BatchShape(prefill, decode, attended, decode + (1 if prefill else 0), context)


def _runs(num_runs: int, seed: int = 0) -> list[MeasuredIteration]:
    """Short runs: each iteration measures its own work plus its predecessor's carry."""
    rng = random.Random(seed)
    samples: list[MeasuredIteration] = []
    for _ in range(num_runs):
        previous = None
        for _ in range(rng.randint(3, 8)):
            shape = _shape(rng)
            noise = 1 + rng.uniform(-0.01, 0.01)
            samples.append(MeasuredIteration(shape, (_own_ms(shape) + _carry_ms(previous)) * noise,
                                             previous))
            previous = shape
    return samples


def test_the_fit_hands_each_carry_back_to_the_iteration_that_causes_it() -> None:
    profile = fit_profile(_runs(80), COORDS)
    assert profile.intercept_ms == pytest.approx(OWN_MS[0], rel=0.05)
    for name, own, fitted in zip(FEATURES, OWN_MS[1:], profile.coefficients_ms, strict=True):
        assert fitted == pytest.approx(own + CARRY_MS.get(name, 0.0), rel=0.1, abs=1e-5), name
    assert profile.fit.mean_relative_error < 0.02  # the lagged model fits what was measured
    assert set(CARRY_MS) == set(CARRIED)


def test_without_the_predecessor_the_carry_biases_the_small_decodes() -> None:
    """The bias the carry-over removes: a run of one-row decodes (rarely after
    a prefill) priced by a fit that cannot tell whose work a duration holds."""
    samples = _runs(80)
    blind = fit_profile([(s.shape, s.duration_ms) for s in samples], COORDS)
    aware = fit_profile(samples, COORDS)
    decode = BatchShape(0, 1, 64, 1, 64)
    truth = _own_ms(decode) + _carry_ms(decode)  # a decode after a decode
    assert aware.predict_ms(decode) == pytest.approx(truth, rel=0.02)
    assert abs(blind.predict_ms(decode) / truth - 1) > 2 * abs(aware.predict_ms(decode) / truth - 1)


def test_the_speed_factor_reads_measured_iterations() -> None:
    samples = _runs(40)
    profile = fit_profile(samples, COORDS)
    slower = [s._replace(duration_ms=s.duration_ms * 1.25) for s in samples]
    assert speed_factor(profile, slower) == pytest.approx(1.25 * speed_factor(profile, samples))


def test_the_batch_shape_counts_the_context_its_decode_rows_read() -> None:
    plan = IterationPlan(
        decision_id=0, input_state_version=0, policy_id="p", policy_version="1",
        work=(WorkItem("a", 0, 0, 0, 32, WorkKind.PREFILL_CHUNK, range(0, 32)),
              WorkItem("b", 0, 0, 40, 41, WorkKind.DECODE_ROW, range(40, 41)),
              WorkItem("c", 0, 0, 99, 100, WorkKind.DECODE_ROW, range(99, 100))),
        tokens_used=34, sequences_used=3)
    assert batch_shape(plan) == BatchShape(32, 2, 32 * 32 + 41 + 100, 3, 41 + 100)


def test_a_v1_profile_loads_as_the_same_model_without_the_decode_context_term(
        tmp_path: Path) -> None:
    obj = fit_profile(_runs(40), COORDS).to_json()
    obj["format"] = "iterserve-profile-v1"
    del obj["coefficients_ms"]["num_decode_context_tokens"]
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(obj))
    profile = parse_cost_model(f"profile:{path}").profile  # type: ignore[attr-defined]
    assert profile.coefficients_ms[-1] == 0.0
    assert FEATURES[-1] == "num_decode_context_tokens"


def _shape_row_by_row(plan: IterationPlan) -> BatchShape:
    """The definition of :func:`batch_shape`, one item at a time (the
    reference its map-based sums are held to)."""
    num_decode_rows = num_attended = num_decode_context = 0
    for item in plan.work:
        attended = (item.end - item.start) * item.end
        num_attended += attended
        if item.kind is WorkKind.DECODE_ROW:
            num_decode_rows += 1
            num_decode_context += attended
    return BatchShape(plan.tokens_used - num_decode_rows, num_decode_rows, num_attended,
                      len(plan.work), num_decode_context)


def _random_plan(rng: random.Random) -> IterationPlan:
    work = []
    for index in range(rng.randint(0, 40)):
        kind = rng.choice([WorkKind.DECODE_ROW, WorkKind.DECODE_ROW, WorkKind.PREFILL_CHUNK,
                           WorkKind.REBUILD])
        start = rng.randint(0, 3000)
        end = start + (1 if kind is WorkKind.DECODE_ROW else rng.randint(1, 512))
        work.append(WorkItem(f"r{index}", 0, 0, start, end, kind, range(start, end)))
    plan = IterationPlan(decision_id=0, input_state_version=0, policy_id="p",
                         policy_version="1", work=tuple(work),
                         tokens_used=sum(item.end - item.start for item in work),
                         sequences_used=len(work))
    return plan


@pytest.mark.parametrize("seed", range(20))
def test_the_batch_shape_equals_its_row_by_row_definition(seed: int) -> None:
    plan = _random_plan(random.Random(seed))
    assert batch_shape(plan) == _shape_row_by_row(plan)
    full = _shape_row_by_row(plan)
    assert batch_shape(plan, attention=False) == BatchShape(
        full.num_prefill_rows, full.num_decode_rows, 0, full.num_sequences, 0)


class _ShapeSeen:
    """A cost model of one's own that does not say what it reads: it is
    given every field (and keeps the shapes it was given)."""

    model_id = spec = "seen"

    def __init__(self) -> None:
        self.shapes: list[BatchShape] = []

    def predict_batch_ms(self, shape: BatchShape) -> float:
        self.shapes.append(shape)
        return 1.0

    def predict_iteration_s(self, num_prefill_rows: int, num_decode_rows: int) -> float:
        return 0.001


@pytest.mark.parametrize("seed", range(10))
def test_the_clock_skips_the_attention_sums_only_for_a_model_that_prices_rows_only(
        seed: int) -> None:
    plan = _random_plan(random.Random(seed))
    state = SchedulerState(decision_id=0, state_version=0, now=0.0, waiting=(), running=(),
                           suspended=(), finished=(), views={}, max_num_batched_tokens=4096,
                           max_num_seqs=64)
    for model in (parse_cost_model("linear:8,0.02,0.1"), parse_cost_model("fixed:10")):
        assert model.prices_rows_only
        clocked = ClockedCost(model, "ms").iteration_duration(plan, state)
        assert clocked == model.predict_batch_ms(batch_shape(plan))
    seen = _ShapeSeen()
    ClockedCost(seen, "ms").iteration_duration(plan, state)
    assert seen.shapes == [batch_shape(plan)]
    profiled = fit_profile(_runs(40), COORDS)
    assert not ProfiledIterationCost("p.json", profiled).prices_rows_only
