"""``iterserve profile`` on the tiny preset writes a profile that loads,
records its coordinates (0x0E) and prices shapes by size."""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path

import pytest

from iterserve.cli.main import main
from iterserve.cost import BatchShape, ProfiledIterationCost, parse_cost_model

pytestmark = pytest.mark.slow


def test_profile_writes_a_loadable_profile_with_its_coordinates(
        tiny_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "tiny.json"
    assert main(["profile", str(tiny_dir), "--grid", "quick", "--threads", "1",
                 "--out", str(out)]) == 0
    assert "held-out relative error" in capsys.readouterr().out
    model = parse_cost_model(f"profile:{out}")
    assert isinstance(model, ProfiledIterationCost)
    coords = dict(model.profile.provenance)
    assert coords["config_hash"] == hashlib.sha256(
        (tiny_dir / "config.json").read_bytes()).hexdigest()
    assert (coords["dtype"], coords["num_threads"]) == ("float32", "1")
    assert coords["python"].startswith(f"Python {platform.python_version()} (")
    assert model.profile.fit.num_heldout > 0
    assert model.predict_batch_ms(BatchShape(0, 1, 64, 1)) < model.predict_batch_ms(
        BatchShape(512, 0, 512 * 256, 1))
