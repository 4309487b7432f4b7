"""Offline scoring of admission estimates after a run (0x06): max never
under-reserves and over-reserves most; a point forecast under-reserves."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from iterserve.records.workload import load_workload, parse_workload
from iterserve.sim.admission_report import admission_report

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "small_kv.json"


def _scores(admission: str) -> dict:
    raw = json.loads(EXAMPLE.read_text())
    raw["kv"]["admission"] = admission
    manifest = parse_workload(raw)
    report = admission_report(manifest.online, manifest.hidden, 131072)
    assert report is not None
    return report


def test_estimate_families_order_as_0x06_says() -> None:
    maximum, point, p90 = _scores("max"), _scores("point"), _scores("quantile")
    assert maximum["under_reservation_rows"] == 0
    assert maximum["over_reservation_rows"] > p90["over_reservation_rows"] > point[
        "over_reservation_rows"]
    assert point["under_reservation_rows"] > p90["under_reservation_rows"]
    assert point["under_reservation_bytes"] == point["under_reservation_rows"] * 131072


def test_no_admission_estimate_no_section() -> None:
    manifest = load_workload(EXAMPLE)
    kv = manifest.online.kv
    assert kv is not None and kv.admission == "none"
    assert admission_report(manifest.online, manifest.hidden, None) is None
    online = dataclasses.replace(manifest.online, kv=None)
    assert admission_report(online, manifest.hidden, None) is None


@pytest.mark.parametrize("admission", ["point", "quantile"])
def test_forecasts_change_the_estimate_not_the_truth(admission: str) -> None:
    """Metamorphic: the realized lengths move the score, never the estimate."""
    raw = json.loads(EXAMPLE.read_text())
    raw["kv"]["admission"] = admission
    first = admission_report(*_online_hidden(raw), None)
    for rid in raw["fixture_only_hidden_truth"]["realized_output_tokens"]:
        raw["fixture_only_hidden_truth"]["realized_output_tokens"][rid] = 1
    second = admission_report(*_online_hidden(raw), None)
    assert first is not None and second is not None
    assert second["under_reservation_rows"] == 0
    assert second["over_reservation_rows"] >= first["over_reservation_rows"]


def _online_hidden(raw: dict):  # type: ignore[no-untyped-def]
    manifest = parse_workload(raw)
    return manifest.online, manifest.hidden
