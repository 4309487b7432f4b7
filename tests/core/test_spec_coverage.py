"""docs/spec-coverage.md names a row for every section id and F-item of the
spec, and every module and test it names exists.

The ids are listed here as the spec has them (0x00 .. 0x12 with their
lettered subsections, F01 .. F72 of the 0x11A registry); where the spec text
is on this machine (ITERSERVE_SPEC, else the project's shared copy) the list
is checked against it too. A path followed by "(branch X)" belongs to a helper
branch not merged yet and is not looked for until the marker is removed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COVERAGE = ROOT / "docs" / "spec-coverage.md"
SPEC = Path(os.environ.get("ITERSERVE_SPEC", "/work/shared/spec/000_723c321e7155665c.txt"))

SECTION_IDS = (
    "0x00", "0x00A", "0x00B", "0x00C", "0x00D", "0x01", "0x01A", "0x02", "0x03", "0x04",
    "0x05", "0x06", "0x07", "0x08", "0x09", "0x09A", "0x09B", "0x0A", "0x0B", "0x0C",
    "0x0D", "0x0E", "0x0F", "0x10", "0x11", "0x11A", "0x12",
)
F_ITEMS = tuple(f"F{number:02d}" for number in range(1, 73))
SPEC_IDS = frozenset(SECTION_IDS + F_ITEMS)

SECTION_PATTERN = re.compile(r"\b0x[0-9A-F]{2}[A-Z]?\b")
F_PATTERN = re.compile(r"\bF\d{2}\b")
ROW_ID = re.compile(r"0x[0-9A-F]{2}[A-Z]?|F\d{2}")
# a backticked module or test, and an optional "(branch X)" right after it
REFERENCE = re.compile(r"`([\w./-]+\.py)(?:::(\w+))?`(\s*\(branch [\w.-]+\))?")
STATUSES = ("done", "partial", "weak", "missing", "not applicable")
REPO_TOP = ("tests/", "scripts/", "benchmarks/")


@dataclass(frozen=True)
class Row:
    spec_id: str
    cells: tuple[str, ...]  # requires, modules, tests, status


def rows_of(text: str) -> list[Row]:
    """The table rows whose first cell is a spec id, in document order."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = tuple(cell.strip() for cell in line.strip().strip("|").split("|"))
        if ROW_ID.fullmatch(cells[0]):
            rows.append(Row(cells[0], cells[1:]))
    return rows


def id_problems(rows: list[Row], spec_ids: frozenset[str]) -> list[str]:
    seen = [row.spec_id for row in rows]
    problems = [f"{spec_id}: no row" for spec_id in sorted(spec_ids - set(seen))]
    problems += [f"{spec_id}: not an id of the spec" for spec_id in sorted(set(seen) - spec_ids)]
    problems += [f"{spec_id}: more than one row" for spec_id in sorted(set(seen))
                 if seen.count(spec_id) > 1]
    return problems


def row_problems(rows: list[Row]) -> list[str]:
    problems = []
    for row in rows:
        if len(row.cells) != 4:
            problems.append(f"{row.spec_id}: {len(row.cells) + 1} cells, not 5")
            continue
        requires, _, tests, status = row.cells
        if not requires or requires == "—":
            problems.append(f"{row.spec_id}: says nothing of what it requires")
        if not status.startswith(STATUSES):
            problems.append(f"{row.spec_id}: status {status!r} is none of {STATUSES}")
        elif not status.startswith(("not applicable", "missing")) and "::" not in tests:
            problems.append(f"{row.spec_id}: status {status.split(':')[0]!r} without a named test")
    return problems


def _file_of(path: str) -> Path:
    return ROOT / path if path.startswith(REPO_TOP) else ROOT / "src" / "iterserve" / path


def _defines(file: Path, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?def {name}\(", file.read_text(), re.MULTILINE) is not None


def reference_problems(rows: list[Row]) -> list[str]:
    problems = []
    for row in rows:
        for path, test_name, branch in REFERENCE.findall(" | ".join(row.cells)):
            if branch:
                continue
            file = _file_of(path)
            if not file.is_file():
                problems.append(f"{row.spec_id}: {path} does not exist")
            elif test_name and not _defines(file, test_name):
                problems.append(f"{row.spec_id}: {path} defines no {test_name}")
    return problems


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return rows_of(COVERAGE.read_text())


def test_every_spec_id_has_a_row_and_no_row_names_another(rows: list[Row]) -> None:
    assert id_problems(rows, SPEC_IDS) == []


def test_every_row_says_what_it_requires_its_status_and_its_test(rows: list[Row]) -> None:
    assert row_problems(rows) == []


def test_every_named_module_and_test_exists(rows: list[Row]) -> None:
    assert reference_problems(rows) == []


@pytest.mark.skipif(not SPEC.is_file(), reason="the spec text is not on this machine")
def test_the_id_list_is_the_spec_s() -> None:
    text = SPEC.read_text(encoding="utf-8")
    assert set(SECTION_PATTERN.findall(text)) == set(SECTION_IDS)
    assert set(F_PATTERN.findall(text)) == set(F_ITEMS)


def test_the_checks_catch_a_missing_row_a_stray_id_and_a_wrong_path() -> None:
    text = COVERAGE.read_text()
    dropped = [row for row in rows_of(text) if row.spec_id != "F50"]
    assert id_problems(dropped, SPEC_IDS) == ["F50: no row"]
    stray = rows_of(text) + [Row("F73", ("x", "—", "—", "not applicable: x"))]
    assert id_problems(stray, SPEC_IDS) == ["F73: not an id of the spec"]
    broken = [Row("F01", ("x", "`records/frontier.py`, `records/no_such.py`",
                          "`tests/core/test_frontier.py::test_no_such_test`, "
                          "`tests/core/test_gone.py::test_x` (branch elsewhere)", "done"))]
    assert reference_problems(broken) == [
        "F01: records/no_such.py does not exist",
        "F01: tests/core/test_frontier.py defines no test_no_such_test",
    ]
    assert row_problems([Row("F01", ("x", "—", "—", "done"))]) == [
        "F01: status 'done' without a named test"]


def test_the_docs_index_links_the_table() -> None:
    assert "(spec-coverage.md)" in (ROOT / "docs" / "README.md").read_text()
