"""The vLLM source pin (0x0D): facts, not copies. A copy that drifts is
named file by file and marker by marker; an installed vLLM (or an
unpacked wheel named by ITERSERVE_VLLM_DIR) must match the pin."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iterserve.policies.vllm_pin import VLLM_PIN, installed_vllm_dir, verify_pin


def test_pin_names_release_files_and_markers() -> None:
    assert VLLM_PIN.release.startswith("vllm 0.32.0")
    assert {f.path for f in VLLM_PIN.files} == {m.path for m in VLLM_PIN.markers}
    assert all(len(f.sha256) == 64 for f in VLLM_PIN.files)
    evidences = " ".join(m.evidences for m in VLLM_PIN.markers)
    assert "R1" in evidences and "R3" in evidences and "SC1" in evidences


def test_a_drifted_copy_is_named_file_by_file_and_marker_by_marker(tmp_path) -> None:
    for pinned in VLLM_PIN.files:
        path = tmp_path / pinned.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x\n" * pinned.num_lines)
    problems = verify_pin(tmp_path)
    assert len(problems) == len(VLLM_PIN.files) + len(VLLM_PIN.markers)
    assert all("sha256" in p for p in problems[:len(VLLM_PIN.files)])
    assert "v1/core/sched/scheduler.py:1270: marker" in " ".join(problems)
    assert verify_pin(tmp_path / "nowhere")[0].endswith("missing")


def test_the_installed_copy_matches_the_pin() -> None:
    given = os.environ.get("ITERSERVE_VLLM_DIR")
    package_dir = Path(given) if given else installed_vllm_dir()
    if package_dir is None:
        pytest.skip("no vLLM installed (set ITERSERVE_VLLM_DIR to an unpacked wheel's vllm/)")
    assert verify_pin(package_dir) == []
