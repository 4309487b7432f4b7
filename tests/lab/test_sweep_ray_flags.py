"""``sweep --ray`` flag errors: one line, exit 2, whether or not Ray is installed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from lab_helpers import small_spec

from iterserve.cli.main import main


@pytest.fixture
def workload(tmp_path) -> Path:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(small_spec(num_requests=4)))
    path = tmp_path / "w.json"
    assert main(["workload", "gen", str(spec), "-o", str(path)]) == 0
    return path


def _sweep(workload: Path, out: Path, *flags: str) -> int:
    return main(["sweep", "--workload", str(workload), "--policy", "edf", "--rates", "1",
                 "--trials", "1", "--out", str(out), *flags])


@pytest.mark.parametrize(("flags", "needle"), [
    (["--ray", "127.0.0.1:1", "--workers", "2"], "--workers applies to local processes"),
    (["--ray", " "], "--ray needs an address"),
])
def test_bad_ray_flags_fail_in_one_line(workload, tmp_path, capsys, flags, needle) -> None:
    assert _sweep(workload, tmp_path / "o", *flags) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_without_ray_installed_the_flag_names_the_extra(workload, tmp_path, capsys,
                                                        monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    assert _sweep(workload, tmp_path / "o", "--ray", "127.0.0.1:1") == 2
    err = capsys.readouterr().err
    assert "pip install 'iterserve[ray]'" in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_the_local_sweep_does_not_import_ray(workload, tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    assert _sweep(workload, tmp_path / "o", "--workers", "1") == 0
