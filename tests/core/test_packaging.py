"""pyproject.toml states compatible ranges; constraints.txt pins the tested
versions. Every direct dependency is pinned, and every pin lies in its range
(otherwise `pip install -c constraints.txt -e .` cannot resolve)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

REPO_ROOT = Path(__file__).resolve().parents[2]


def _project() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO_ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_every_direct_dependency_is_pinned_inside_its_range() -> None:
    project, pins = _project(), _pins()
    requirements = [*project["dependencies"],
                    *(r for extra in project["optional-dependencies"].values() for r in extra)]
    for text in requirements:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} has no pin in constraints.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{requirement.name}=={pins[name]} is outside {requirement.specifier}")


def test_python_and_torch_are_ranges_not_pins() -> None:
    project = _project()
    python = SpecifierSet(project["requires-python"])
    assert all(python.contains(v) for v in ("3.11.2", "3.12.1", "3.13.0", "3.14.0"))
    torch = next(Requirement(r) for r in project["dependencies"] if r.startswith("torch"))
    assert not any(spec.operator == "==" for spec in torch.specifier)
    assert torch.specifier.contains(_pins()["torch"])
