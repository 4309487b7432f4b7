"""Replay re-derives every golden decision log, whose headers predate the
``policy_settings`` key (the policy is then made with the settings its
workload carried), and a log whose settings came only from a CLI flag.

The golden logs are format 2 (written before the chain and the hidden-truth
digest existed, issue 14): they still replay, and with their workload file
their results, durations and capacity facts are re-derived too."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from iterserve.cli.main import main
from iterserve.sim.replay import replay

from .golden_cases import LOG_DIR, REGENERATED, REPO_ROOT, workload_paths


@pytest.mark.parametrize("path", sorted(LOG_DIR.glob("*.jsonl.gz")), ids=lambda p: p.name)
def test_every_golden_log_replays(path, tmp_path) -> None:
    log = tmp_path / "decisions.jsonl"
    log.write_bytes(gzip.decompress(path.read_bytes()))
    header = json.loads(log.read_text().splitlines()[0])
    regenerated = path.name.removesuffix(".jsonl.gz") in REGENERATED
    assert ("policy_settings" in header) is regenerated
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


@pytest.fixture(scope="module")
def workloads(tmp_path_factory) -> dict[str, Path]:
    return workload_paths(tmp_path_factory.mktemp("golden-replay"))


LOGS = sorted(path.name.removesuffix(".jsonl.gz") for path in LOG_DIR.glob("*.jsonl.gz")
              if path.name.removesuffix(".jsonl.gz") not in REGENERATED)


@pytest.mark.parametrize("name", LOGS)
def test_format_2_golden_log_replays_with_its_results_rederived(workloads, name, tmp_path,
                                                                capsys):
    log = tmp_path / "log.jsonl"
    log.write_bytes(gzip.decompress((LOG_DIR / f"{name}.jsonl.gz").read_bytes()))
    assert b'"format":2' in log.read_bytes().split(b"\n", 1)[0]
    capsys.readouterr()
    assert main(["replay", str(log)]) == 0, capsys.readouterr().err
    assert "results NOT checked (a format-2 log has no digest chain)" in capsys.readouterr().out
    workload = workloads[name.split("__")[0]]
    assert main(["replay", str(log), "--workload", str(workload)]) == 0, capsys.readouterr().err
    assert "results and durations re-derived" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(REGENERATED))
def test_a_regenerated_golden_log_replays_with_its_results_rederived(workloads, name, tmp_path,
                                                                    capsys):
    log = tmp_path / "log.jsonl"
    log.write_bytes(gzip.decompress((LOG_DIR / f"{name}.jsonl.gz").read_bytes()))
    capsys.readouterr()
    workload = workloads[name.split("__")[0]]
    assert main(["replay", str(log), "--workload", str(workload)]) == 0, capsys.readouterr().err
    assert "results and durations re-derived" in capsys.readouterr().out
