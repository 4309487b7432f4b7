"""The layers are a contract a tool checks (issue 9 step 8): ``lint-imports``
reads ``[tool.importlinter]`` in pyproject.toml and ``scripts/test.sh`` runs
it. These tests prove the contract covers every subpackage and that an upward
import or a torch import below ``model/`` breaks it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from .helpers import REPO_ROOT

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGE = REPO_ROOT / "src" / "iterserve"


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return list(config["contracts"])


def _layered_modules() -> set[str]:
    (layers,) = [c["layers"] for c in _contracts() if c["type"] == "layers"]
    assert isinstance(layers, list)
    return {name.strip() for layer in layers for name in layer.replace(":", "|").split("|")}


def test_every_subpackage_and_top_module_sits_in_a_layer():
    children = {f"iterserve.{p.stem}" for p in PACKAGE.iterdir()
                if (p.is_dir() and (p / "__init__.py").exists())
                or (p.suffix == ".py" and p.stem != "__init__")}
    assert children == _layered_modules()


def test_every_subpackage_says_what_it_owns():
    for package in PACKAGE.iterdir():
        if package.is_dir() and package.name != "__pycache__":
            init = package / "__init__.py"
            assert init.exists(), package
            assert init.read_text().startswith('"""'), init


def _lint(tmp_path: Path, injections: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run lint-imports over a copy of the package with each ``injections``
    line (module path -> source line) appended to that module of the copy."""
    shutil.copytree(PACKAGE, tmp_path / "src" / "iterserve",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for module, line in injections.items():
        target = tmp_path / "src" / "iterserve" / module
        target.write_text(target.read_text() + line + "\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_package_as_it_is_keeps_every_contract(tmp_path):
    proc = _lint(tmp_path, {})
    assert proc.returncode == 0, proc.stdout + proc.stderr


INJECTED = {  # module of the copy -> (appended line, the breach lint-imports must name)
    "records/errors.py": ("import iterserve.cli.main  # noqa",
                          "iterserve.records is not allowed to import iterserve.cli"),
    "engine/loop.py": ("from iterserve.sim import executor  # noqa",
                       "iterserve.engine is not allowed to import iterserve.sim"),
    "sim/executor.py": ("import iterserve.model.loader  # noqa",
                        "iterserve.sim is not allowed to import iterserve.model"),
    "plan/builder.py": ("import torch  # noqa", "iterserve.plan is not allowed to import torch"),
}


def test_upward_sibling_and_torch_imports_each_break_a_contract(tmp_path):
    proc = _lint(tmp_path, {module: line for module, (line, _) in INJECTED.items()})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for _, breach in INJECTED.values():
        assert breach in proc.stdout
