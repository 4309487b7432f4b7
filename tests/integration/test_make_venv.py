"""scripts/make_venv.sh: the interpreter a fresh .venv is made from."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_venv.sh"


def _make(target: Path, python: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": python}
    return subprocess.run(["bash", str(SCRIPT), str(target)], env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_first_candidate_that_makes_a_venv_is_taken(tmp_path: Path) -> None:
    base = os.path.realpath(sys.executable)  # the venv's interpreter, resolved
    made = _make(tmp_path / "venv", f"/nonexistent/python3.11 {base}")
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == f"made {tmp_path / 'venv'} from {base}"
    config = (tmp_path / "venv" / "pyvenv.cfg").read_text()
    assert f"home = {os.path.dirname(base)}" in config
    assert (tmp_path / "venv" / "bin" / "python").exists()


def test_no_candidate_is_one_line_and_exit_2(tmp_path: Path) -> None:
    made = _make(tmp_path / "venv", "/nonexistent/python3.11 /bin/false")
    assert made.returncode == 2
    assert made.stderr == ("setup: no Python could make "
                           f"{tmp_path / 'venv'} (tried: /nonexistent/python3.11 /bin/false)\n")
    assert not (tmp_path / "venv").exists()  # nothing half-made is left


def test_an_existing_venv_is_kept(tmp_path: Path) -> None:
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    made = _make(tmp_path / "venv", "/nonexistent/python3.11")
    assert (made.returncode, made.stdout, made.stderr) == (0, "", "")
    assert python.read_text() == "#!/bin/sh\n"
