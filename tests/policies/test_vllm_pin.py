"""vLLM source pins (0x0D): facts, not copies. The verifier is tested on a
small synthetic tree (always); the pins themselves against the real vLLM
wheels when a path to one is given:

    ITERSERVE_VLLM_023=/tmp/vllm023/vllm-0.23.0-2-cp38-abi3-manylinux_2_28_x86_64.whl
    ITERSERVE_VLLM_032=/tmp/vllm032/vllm-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl

(a wheel file, an unpacked wheel or its ``vllm/`` folder)."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import re
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from iterserve.policies.vllm_pin import (
    POLICY_PIN,
    Marker,
    PinnedFile,
    SourcePin,
    SourceTree,
    build_commit,
    verify_pin,
)
from iterserve.policies.vllm_pin_spec import SPEC_PIN

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "verify_vllm_pin.py"
_A = b"def schedule(self):\n    token_budget = 8\n    return token_budget\n"
_B = b"max_num_seqs: int = 4\n"


def _pin_of(files: dict[str, bytes], markers: tuple[Marker, ...]) -> SourcePin:
    pinned = tuple(PinnedFile(path, hashlib.sha256(data).hexdigest(), len(data),
                              data.count(b"\n"), "") for path, data in files.items())
    return SourcePin("toy 1.0", "v1.0", "", "toy.whl", "", pinned, markers)


TOY_FILES = {"v1/core/sched/scheduler.py": _A, "config/scheduler.py": _B}
TOY_PIN = _pin_of(TOY_FILES, (
    Marker("v1/core/sched/scheduler.py", 1, "def schedule(", "entry"),
    Marker("v1/core/sched/scheduler.py", 2, "token_budget = 8", "budget"),
    Marker("config/scheduler.py", 1, "max_num_seqs", "field"),
))


def _write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for path, data in files.items():
        target = root / "vllm" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root


def _write_wheel(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(f"vllm/{name}", data)
    return path


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("verify_vllm_pin", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_exact_copy_verifies_as_a_tree_a_package_folder_and_a_wheel(tmp_path) -> None:
    root = _write_tree(tmp_path / "tree", TOY_FILES)
    wheel = _write_wheel(tmp_path / "toy.whl", TOY_FILES)
    for location in (root, root / "vllm", wheel):
        assert verify_pin(SourceTree(location), TOY_PIN) == [], location


def test_each_drift_is_named_on_its_own_line(tmp_path) -> None:
    drifted = dict(TOY_FILES)
    drifted["v1/core/sched/scheduler.py"] = _A.replace(b"8", b"9")  # same size and lines
    problems = verify_pin(SourceTree(_write_tree(tmp_path, drifted)), TOY_PIN)
    assert problems == [
        f"v1/core/sched/scheduler.py: sha256 {hashlib.sha256(drifted['v1/core/sched/scheduler.py']).hexdigest()}, "
        f"pinned {TOY_PIN.files[0].sha256}",
        "v1/core/sched/scheduler.py:2: marker 'token_budget = 8' not found",
    ]
    assert all("\n" not in p for p in problems)


def test_a_moved_line_breaks_size_line_count_and_the_markers_below_it(tmp_path) -> None:
    drifted = dict(TOY_FILES)
    drifted["v1/core/sched/scheduler.py"] = b"# licence\n" + _A
    problems = verify_pin(SourceTree(_write_wheel(tmp_path / "w.whl", drifted)), TOY_PIN)
    text = "\n".join(problems)
    assert f"scheduler.py: {len(_A) + 10} bytes, pinned {len(_A)}" in text
    assert "scheduler.py: 4 lines, pinned 3" in text
    assert "scheduler.py:1: marker 'def schedule(' not found" in text
    assert "scheduler.py:2: marker 'token_budget = 8' not found" in text
    assert "config/scheduler.py" not in text


def test_a_missing_file_is_named_and_its_markers_fail(tmp_path) -> None:
    files = {"v1/core/sched/scheduler.py": _A}
    problems = verify_pin(SourceTree(_write_tree(tmp_path, files)), TOY_PIN)
    assert problems == ["config/scheduler.py: missing",
                        "config/scheduler.py:1: marker 'max_num_seqs' not found"]


def test_a_location_that_is_no_copy_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="no such file or folder"):
        SourceTree(tmp_path / "nowhere")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="not a wheel"):
        SourceTree(tmp_path / "notes.txt")


def test_the_script_exits_0_1_2_with_one_line_errors(tmp_path, capsys, monkeypatch) -> None:
    script = _script()
    monkeypatch.setitem(script.PINS, "spec", TOY_PIN)
    good = _write_wheel(tmp_path / "good.whl", TOY_FILES)
    assert script.main([str(good)]) == 0
    assert capsys.readouterr().out.startswith(f"ok: {good} is toy 1.0 (v1.0): 2 files")
    bad = _write_wheel(tmp_path / "bad.whl", {"v1/core/sched/scheduler.py": _A})
    assert script.main([str(bad)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: config/scheduler.py: missing",
        "error: config/scheduler.py:1: marker 'max_num_seqs' not found"]
    assert script.main([str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_build_commit_is_read_from_version_py_and_compared(tmp_path, capsys,
                                                              monkeypatch) -> None:
    version = b"__version__ = version = '1.0'\n__commit_id__ = commit_id = 'g0fc695fc6'\n"
    wheel = _write_wheel(tmp_path / "toy.whl", {**TOY_FILES, "_version.py": version})
    assert build_commit(SourceTree(wheel)) == "0fc695fc6"
    assert build_commit(SourceTree(_write_tree(tmp_path / "t", TOY_FILES))) is None
    script = _script()
    for git_object, word in (("0fc695fc6d1d", "the"), ("91df0fad4e", "not the")):
        monkeypatch.setitem(script.PINS, "spec", dataclasses.replace(TOY_PIN,
                                                                     git_object=git_object))
        assert script.main([str(wheel)]) == 0
        assert capsys.readouterr().out.splitlines()[1] == (
            f"built from commit 0fc695fc6: {word} git object {git_object} the pin names")


def test_the_spec_pin_holds_the_facts_the_spec_names() -> None:
    assert (SPEC_PIN.release, SPEC_PIN.tag) == ("vllm 0.23.0", "v0.23.0")
    assert SPEC_PIN.git_object == "0fc695fc6d1d82e9a5ac6835ac8e4e1c83703665"  # 0x0D's text
    assert len(SPEC_PIN.markers) == 35  # "35 line markers"
    assert {f.path for f in SPEC_PIN.files} == {m.path for m in SPEC_PIN.markers}
    assert len({(m.path, m.line) for m in SPEC_PIN.markers}) == 35
    schedule = [m for m in SPEC_PIN.markers if m.fragment.startswith("def schedule(")]
    assert [m.line for m in schedule] == [340]  # "At Scheduler.schedule() line 340"
    rules = {re.search(r"rule (SC\d)", m.evidences).group(1)  # type: ignore[union-attr]
             for m in SPEC_PIN.markers if "rule SC" in m.evidences}
    assert rules == {"SC1", "SC2", "SC3"}
    for pin in (SPEC_PIN, POLICY_PIN):
        assert all(re.fullmatch(r"[0-9a-f]{64}", f.sha256) for f in pin.files)
        assert all(f.url.endswith(f"/{pin.tag}/vllm/{f.path}") for f in pin.files)


def _real_copy(variable: str) -> SourceTree:
    given = os.environ.get(variable)
    if not given:
        pytest.skip(f"set {variable} to the vLLM wheel (or its unpacked tree) to check the pin")
    return SourceTree(Path(given))


def test_the_v0_23_0_wheel_is_the_spec_pin() -> None:
    assert verify_pin(_real_copy("ITERSERVE_VLLM_023"), SPEC_PIN) == []


def test_the_0_32_0_wheel_is_the_policy_pin() -> None:
    assert verify_pin(_real_copy("ITERSERVE_VLLM_032"), POLICY_PIN) == []
