"""Replay re-derives every golden decision log, whose headers predate the
``policy_settings`` key (the policy is then made with the settings its
workload carried), and a log whose settings came only from a CLI flag."""

from __future__ import annotations

import gzip
import json

import pytest

from iterserve.cli.main import main
from iterserve.engine.replay import replay

from .golden_cases import LOG_DIR, REPO_ROOT


@pytest.mark.parametrize("path", sorted(LOG_DIR.glob("*.jsonl.gz")), ids=lambda p: p.name)
def test_every_golden_log_replays(path, tmp_path) -> None:
    log = tmp_path / "decisions.jsonl"
    log.write_bytes(gzip.decompress(path.read_bytes()))
    assert "policy_settings" not in json.loads(log.read_text().splitlines()[0])
    report = replay(log)
    assert report.num_iterations > 0


def test_a_cli_setting_is_recorded_and_replayed(tmp_path) -> None:
    log = tmp_path / "decisions.jsonl"
    rc = main(["simulate", "--no-plots", "--workload", str(REPO_ROOT / "examples/abc_fixture.json"),
               "--policy", "sarathi", "--policy-setting", "chunk_size=2",
               "--out", str(tmp_path / "run"), "--decision-log", str(log)])
    assert rc == 0
    header = json.loads(log.read_text().splitlines()[0])
    assert header["policy_settings"] == {"chunk_size": 2}
    assert replay(log).policy_id == "sarathi"
