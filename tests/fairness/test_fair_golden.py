"""The 0x09A policies decide exactly as their committed golden logs say
(decision lines byte for byte; see fair_golden.py)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from fair_golden import POLICIES, fixture_path, run_case, workload_paths

NAMES = ("abc_fixture", "burst_0x07", "small_kv", "two_clients", "mixed")


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, Path]:
    return workload_paths(tmp_path_factory.mktemp("fair-golden"))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", NAMES)
def test_decision_lines_are_byte_identical(paths, name, policy, tmp_path) -> None:
    data = run_case(paths[name], policy, tmp_path)
    assert data is not None, f"{name} under {policy} no longer runs"
    expected = gzip.decompress(fixture_path(name, policy).read_bytes()).splitlines()
    actual = data.splitlines()
    assert json.loads(actual[0])["policy"] == json.loads(expected[0])["policy"]
    assert len(actual) == len(expected), "number of decision lines changed"
    for number, (got, want) in enumerate(zip(actual[1:], expected[1:], strict=True), start=2):
        assert got == want, f"{name} under {policy}: line {number} differs"
