"""The one cost-model home (issue 9 step 5): parsing, the clock scale, the
profiled model's file and fit (issue 15 step 4), and the layer rule."""

from __future__ import annotations

import ast
import json
import random
from pathlib import Path

import pytest

from iterserve.cli.main import main
from iterserve.cost import (
    BatchShape,
    ClockedCost,
    CostModelError,
    FixedIterationCost,
    IterationCostModel,
    LinearIterationCost,
    ProfiledIterationCost,
    parse_cost_model,
    seconds_per_clock_unit,
)
from iterserve.cost.fit import fit_profile, speed_factor
from iterserve.cost.profiled import profile_from_json

REPO_ROOT = Path(__file__).resolve().parents[2]
COST_DIR = REPO_ROOT / "src" / "iterserve" / "cost"
COORDS = (("config_hash", "ab" * 32), ("dtype", "float32"), ("num_threads", "1"),
          ("torch_version", "2.x"), ("cpu_model", "test cpu"), ("machine", "test"))
TRUE_MS = (1.5, 0.02, 0.3, 1e-5, 0.1, 0.4)  # intercept, then FEATURES order


def _true_ms(shape: BatchShape) -> float:
    features = (1, shape.num_prefill_rows, shape.num_decode_rows, shape.num_attended_tokens,
                shape.num_sequences, shape.num_sequences > 1)
    return sum(c * x for c, x in zip(TRUE_MS, features, strict=True))


def _samples(num: int, noise: float, seed: int = 0) -> list[tuple[BatchShape, float]]:
    rng = random.Random(seed)
    samples = []
    for _ in range(num):
        decode = rng.randint(0, 32)
        prefill = rng.choice([0, rng.randint(1, 512)])
        shape = BatchShape(prefill, decode or (0 if prefill else 1),
                           rng.randint(0, 200_000), decode + (1 if prefill else 0))
        samples.append((shape, _true_ms(shape) * (1 + rng.uniform(-noise, noise))))
    return samples


def _profile_file(tmp_path: Path, **changes: object) -> Path:
    obj = fit_profile(_samples(200, 0.02), COORDS).to_json()
    obj.update(changes)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(obj))
    return path


def test_every_model_satisfies_the_one_protocol(tmp_path: Path) -> None:
    profiled = parse_cost_model(f"profile:{_profile_file(tmp_path)}")
    for model in (FixedIterationCost(10), LinearIterationCost(1, 0.5, 0.25), profiled):
        assert isinstance(model, IterationCostModel)
        assert parse_cost_model(model.spec) == model


def test_the_fit_recovers_a_known_model_and_reports_held_out_error() -> None:
    profile = fit_profile(_samples(300, 0.05), COORDS)
    shape = BatchShape(256, 8, 50_000, 9)
    assert profile.predict_ms(shape) == pytest.approx(_true_ms(shape), rel=0.05)
    assert profile.fit.num_heldout == 60 and profile.fit.num_train == 240
    assert 0 < profile.fit.mean_relative_error < 0.05
    assert profile.fit.mean_relative_error <= profile.fit.max_relative_error < 0.1


def test_a_profile_round_trips_and_predicts_from_the_batch_shape(tmp_path: Path) -> None:
    model = parse_cost_model(f"profile:{_profile_file(tmp_path)}")
    assert isinstance(model, ProfiledIterationCost)
    assert model.model_id.startswith("profiled-iteration-v1(config_hash=abababababab,")
    small, large = BatchShape(0, 1, 10, 1), BatchShape(500, 30, 150_000, 31)
    assert 0 < model.predict_batch_ms(small) < model.predict_batch_ms(large)
    assert model.predict_iteration_s(0, 1) == pytest.approx(
        model.predict_batch_ms(BatchShape.of_rows(0, 1)) / 1000)


@pytest.mark.parametrize(("changes", "field"), [
    ({"format": "v0"}, "format"),
    ({"floor_ms": -1}, "floor_ms"),
    ({"intercept_ms": "fast"}, "intercept_ms"),
    ({"coefficients_ms": {"num_prefill_rows": 1.0}}, "coefficients_ms.num_decode_rows"),
    # a name the format has no feature for is named (an extra term, say a v2 one in a v1
    # profile, was dropped from every duration without a word)
    ({"coefficients_ms": {"num_prefil_rows": 1.0}}, "coefficients_ms: unknown feature"),
    ({"provenance": {"dtype": "float32"}}, "provenance.config_hash"),
    ({"provenance": {**dict(COORDS), "python": ""}}, "provenance.python"),
    ({"fit": None}, "fit"),
])
def test_a_bad_profile_names_its_field(tmp_path: Path, changes: dict[str, object],
                                       field: str) -> None:
    path = _profile_file(tmp_path, **changes)
    with pytest.raises(CostModelError, match=f"profile {path}: {field}"):
        parse_cost_model(f"profile:{path}")


def test_the_interpreter_is_a_coordinate_where_a_profile_names_it(tmp_path: Path) -> None:
    """Older profiles name no interpreter and still load; a newer one's is kept."""
    older = parse_cost_model(f"profile:{_profile_file(tmp_path)}")
    assert isinstance(older, ProfiledIterationCost)
    assert "python" not in dict(older.profile.provenance)
    named = {**dict(COORDS), "python": "Python 3.11.2 (/usr, libpython static)"}
    newer = parse_cost_model(f"profile:{_profile_file(tmp_path, provenance=named)}")
    assert isinstance(newer, ProfiledIterationCost)
    assert newer.profile.provenance == (*COORDS, ("python", named["python"]))
    assert newer.profile.to_json()["provenance"] == named


def test_unreadable_profiles_fail_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(CostModelError, match="missing.json: no such file"):
        parse_cost_model(f"profile:{tmp_path / 'missing.json'}")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(CostModelError, match="not JSON"):
        parse_cost_model(f"profile:{tmp_path / 'bad.json'}")
    with pytest.raises(CostModelError, match="expected profile:PROFILE.json"):
        parse_cost_model("profile:")
    with pytest.raises(CostModelError, match="expected an object"):
        profile_from_json([])


def test_the_clock_scale_is_one_helper(tmp_path: Path) -> None:
    profiled = parse_cost_model(f"profile:{_profile_file(tmp_path)}")
    assert seconds_per_clock_unit("ms", profiled) == 0.001
    assert seconds_per_clock_unit("iteration", None) == 1.0
    with pytest.raises(CostModelError, match="iteration clock needs a fixed cost model"):
        ClockedCost(profiled, "iteration")
    assert ClockedCost.unit().model == FixedIterationCost(1000.0)


def test_simulate_runs_on_a_profile_and_refuses_a_bad_one(tmp_path: Path, capsys) -> None:
    workload = str(REPO_ROOT / "examples" / "burst_0x07.json")
    path = _profile_file(tmp_path)
    out = tmp_path / "out"
    assert main(["simulate", "--workload", workload, "--policy", "least-slack",
                 "--cost-model", f"profile:{path}", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["cost_model"]["spec"] == f"profile:{path}"
    assert report["cost_model"]["model_id"].startswith("profiled-iteration-v1")
    bad = _profile_file(tmp_path, floor_ms=0)
    assert main(["simulate", "--workload", workload, "--policy", "vllm",
                 "--cost-model", f"profile:{bad}",
                 "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "floor_ms: must be > 0" in err[0]


def test_the_cost_layer_imports_only_records() -> None:
    for path in COST_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("iterserve."):
                assert node.module.split(".")[1] in {"cost", "records"}, (path.name, node.module)


def test_a_profile_scales_by_the_measured_speed_of_the_machine() -> None:
    profile = fit_profile(_samples(200, 0.0), COORDS)
    slower = [(shape, ms * 1.25) for shape, ms in _samples(40, 0.0, seed=1)]
    factor = speed_factor(profile, slower)
    assert factor == pytest.approx(1.25, rel=1e-3)
    shape = BatchShape(64, 4, 9_000, 5)
    assert profile.scaled(factor).predict_ms(shape) == pytest.approx(
        1.25 * profile.predict_ms(shape), rel=1e-3)
    with pytest.raises(CostModelError, match="scale factor"):
        profile.scaled(0.0)


@pytest.mark.parametrize(("flags", "message"), [
    (["--grid", "huge"], "--grid: unknown grid 'huge'; valid grids: full, quick"),
    (["--policy", "nope"], "unknown policy"),
    (["--dtype", "int8"], "--dtype: must be one of"),
    (["--threads", "0"], "--threads: must be >= 1"),
    (["--threads", "100000"], "--threads: must be <= 1024"),  # ran past 2 minutes on tiny
    (["--out", "{tmp}"], "argument --out: {tmp} is a directory"),  # refused after profiling
])
def test_profile_flags_fail_in_one_line_before_any_model_work(
        tmp_path: Path, capsys, flags: list[str], message: str) -> None:
    flags = [flag.format(tmp=tmp_path) for flag in flags]
    assert main(["profile", str(tmp_path / "no-model"), "--out", str(tmp_path / "p.json"),
                 *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message.format(tmp=tmp_path) in err[0]
