"""Format-2 logs still replay (issue 14): every committed golden log (written
before the chain and the hidden-truth digest existed) re-derives its plans,
and with its workload file its results, durations and capacity facts too."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from iterserve.cli.main import main

from .golden_cases import LOG_DIR, workload_paths


@pytest.fixture(scope="module")
def workloads(tmp_path_factory) -> dict[str, Path]:
    return workload_paths(tmp_path_factory.mktemp("golden-replay"))


LOGS = sorted(path.name.removesuffix(".jsonl.gz") for path in LOG_DIR.glob("*.jsonl.gz"))


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
