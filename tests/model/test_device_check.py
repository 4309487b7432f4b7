"""scripts/device_check.py without a GPU: its --dry-run runs every section's
code on the CPU at tiny sizes; the full run refuses to start without CUDA."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device_check.py"


def device_check():
    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["device_check"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_the_full_run_needs_cuda(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert device_check().main([str(tmp_path)]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_agreement_counts_positions_and_first_tokens() -> None:
    agreement = device_check().agreement
    assert agreement([(1, 2, 3), (4,)], [(1, 2, 3), (4,)])["identical"]
    got = agreement([(1, 2, 3), (4, 5)], [(1, 9, 3), (4, 5)])
    assert not got["identical"] and got["first_tokens_equal"]
    assert got["token_agreement"] == pytest.approx(4 / 5)


@pytest.mark.slow
def test_dry_run_writes_every_section(tmp_path: Path) -> None:
    assert device_check().main(["--dry-run", "--no-generate-batch", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "device_check.json").read_text())
    assert report["correctness"]["fp32_tiny"]["identical"] is True
    workload = report["workload"]
    requests, each = workload["requests"], workload["output_tokens_each"]
    assert workload["iterserve"]["output_tokens"] == requests * each
    assert workload["iterserve"]["backend"] == "flex" and workload["iterserve"]["warm"]
    assert workload["transformers_static"]["output_tokens"] == requests * each
    assert workload["iterserve"]["decode_steps_all_live"] >= 1
    assert "iterserve_over_static" in workload
    attention = report["attention"]
    assert attention["decode"]["flex"]["max_abs_diff"] < 1e-5
    assert attention["mixed"]["flex"]["max_abs_diff"] < 1e-5 and "varlen" not in attention["mixed"]
    assert "error" not in report["profile"] and report["profile"]["table"]
    summary = (tmp_path / "device_check.md").read_text()
    assert "| iterserve |" in summary and "## profile: top operators" in summary
