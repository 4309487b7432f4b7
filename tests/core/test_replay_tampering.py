"""Replay catches tampering with every field class (issue 14 part 3).

A simulated run's log is edited on its first, a middle and its last
iteration line, one field class at a time, and replayed twice: with the
workload file (results and durations re-derived on the simulated executor)
and without it (the digest chain alone). Each edit is one line on stderr
naming the line number and the field that diverged, exit 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from iterserve.cli.main import main
from log_rows import as_columns, row_lines

from .helpers import random_workload_json, write_json

COST_MODEL = "linear:5,0.5,0.25"
Line = dict


@pytest.fixture(scope="module")
def workload_path(tmp_path_factory) -> Path:
    workload = random_workload_json(seed=2024, num_requests=12)
    workload["clock"] = "ms"  # durations come from the cost model
    workload["kv"] = {"num_kv_blocks": 12, "block_size": 2}  # capacity facts are counts
    return write_json(tmp_path_factory.mktemp("tamper") / "workload.json", workload)


@pytest.fixture(scope="module")
def log_path(workload_path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run")
    log = out / "decisions.jsonl"
    assert main(["simulate", "--no-plots", "--workload", str(workload_path), "--policy", "vllm",
                 "--cost-model", COST_MODEL, "--out", str(out),
                 "--decision-log", str(log)]) == 0
    return log


def _lines(path: Path) -> list[Line]:
    return row_lines(path)  # one object per work item and completion, to edit


def _write(path: Path, lines: list[Line]) -> Path:
    path.write_text("".join(json.dumps(as_columns(line)) + "\n" for line in lines))
    return path


def _iteration_indexes(lines: list[Line]) -> dict[str, int]:
    indexes = [i for i, line in enumerate(lines) if line["type"] == "iteration"]
    return {"first": indexes[0], "middle": indexes[len(indexes) // 2], "last": indexes[-1]}


def _replay(path: Path, workload: Path | None, capsys) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["replay", str(path)] + ([] if workload is None else ["--workload", str(workload)]))
    return rc, capsys.readouterr().err


def test_the_untouched_log_replays_in_both_modes(log_path, workload_path, capsys):
    lines = _lines(log_path)
    assert lines[0]["format"] == 6 and lines[0]["executor"] == "simulated"
    assert any(line["result"]["capacity"]["num_blocks_free"] < 12 for line in lines[1:])
    assert len({line["result"]["duration"] for line in lines[1:]}) > 1
    assert "realized_output_tokens" not in log_path.read_text()
    capsys.readouterr()
    assert main(["replay", str(log_path), "--workload", str(workload_path)]) == 0
    assert "results and durations re-derived" in capsys.readouterr().out
    assert main(["replay", str(log_path)]) == 0
    assert "digest chain only" in capsys.readouterr().out


def _flip_plan(line: Line) -> None:
    line["plan"]["work"][0]["end"] += 1


def _flip_token(line: Line) -> None:
    completion = line["result"]["completed"][-1]
    completion["token_id"] = (completion["token_id"] or 0) + 1


def _flip_duration(line: Line) -> None:
    line["result"]["duration"] += 0.5


def _flip_capacity(line: Line) -> None:
    line["result"]["capacity"]["num_blocks_free"] -= 1


def _flip_chain(line: Line) -> None:
    line["chain"] = ("0" if line["chain"][0] != "0" else "1") + line["chain"][1:]


# field class -> (edit, what replay --workload names, what the chain alone names)
LINE_FLIPS: dict[str, tuple[Callable[[Line], None], str, str]] = {
    "plan": (_flip_plan, "plan differs at plan.work[0].end", "plan differs at plan.work[0].end"),
    "result-token": (_flip_token, "result differs at result.completed[", "chain does not match"),
    "duration": (_flip_duration, "result differs at result.duration", "chain does not match"),
    "capacity": (_flip_capacity, "result differs at result.capacity.num_blocks_free",
                 "chain does not match"),
    "chain": (_flip_chain, "chain does not match", "chain does not match"),
}


@pytest.mark.parametrize("with_workload", [True, False], ids=["workload", "chain-only"])
@pytest.mark.parametrize("position", ["first", "middle", "last"])
@pytest.mark.parametrize("field_class", sorted(LINE_FLIPS))
def test_a_flipped_field_is_named_with_its_line(log_path, workload_path, field_class, position,
                                                 with_workload, tmp_path, capsys):
    lines = _lines(log_path)
    index = _iteration_indexes(lines)[position]
    edit, named_with_workload, named_by_chain = LINE_FLIPS[field_class]
    edit(lines[index])
    edited = _write(tmp_path / "edited.jsonl", lines)
    rc, err = _replay(edited, workload_path if with_workload else None, capsys)
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"line {index + 1}, decision {lines[index]['decision_id']}:" in err, err
    assert (named_with_workload if with_workload else named_by_chain) in err, err


def _flip_cost_model(header: Line) -> None:
    header["cost_model"] = "linear:5,0.5,0.3"


def _flip_digest(header: Line) -> None:
    digest = header["output_lengths_sha256"]
    header["output_lengths_sha256"] = ("0" if digest[0] != "0" else "1") + digest[1:]


HEADER_FLIPS = {
    "cost-model": (_flip_cost_model, "chain does not match: a header field", "cost_model"),
    "hidden-truth-digest": (_flip_digest, "output_lengths_sha256 does not match", None),
    "header-chain": (_flip_chain, "chain does not match: a header field", None),
}


@pytest.mark.parametrize("with_workload", [True, False], ids=["workload", "chain-only"])
@pytest.mark.parametrize("field_class", sorted(HEADER_FLIPS))
def test_a_flipped_header_field_is_named(log_path, workload_path, field_class, with_workload,
                                         tmp_path, capsys):
    lines = _lines(log_path)
    edit, named_with_workload, also = HEADER_FLIPS[field_class]
    edit(lines[0])
    rc, err = _replay(_write(tmp_path / "edited.jsonl", lines),
                      workload_path if with_workload else None, capsys)
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "line 1, header:" in err, err
    expected = named_with_workload if with_workload else "chain does not match: a header field"
    assert expected in err and (also is None or also in err), err


def test_another_workloads_hidden_truth_is_refused(log_path, workload_path, tmp_path, capsys):
    other = json.loads(workload_path.read_text())
    lengths = other["fixture_only_hidden_truth"]["realized_output_tokens"]
    lengths["r00"] += 1
    rc, err = _replay(log_path, write_json(tmp_path / "other.json", other), capsys)
    assert rc == 2 and "line 1, header: output_lengths_sha256 does not match" in err, err


def test_a_dropped_line_is_named_at_the_next_line(log_path, tmp_path, capsys):
    """The replayed decision ids catch it before the chain does."""
    lines = _lines(log_path)
    index = _iteration_indexes(lines)["middle"]
    del lines[index]
    rc, err = _replay(_write(tmp_path / "dropped.jsonl", lines), None, capsys)
    assert rc == 2 and f"line {index + 1}, decision {index}: replay is at decision" in err, err


def test_an_added_field_that_replays_the_same_still_breaks_the_chain(log_path, tmp_path,
                                                                       capsys):
    """An empty ``rejected`` list re-derives identically; only the chain sees it."""
    lines = _lines(log_path)
    index = _iteration_indexes(lines)["middle"]
    assert "rejected" not in lines[index]
    lines[index]["rejected"] = []
    rc, err = _replay(_write(tmp_path / "edited.jsonl", lines), None, capsys)
    assert rc == 2 and f"line {index + 1}, decision" in err and "chain does not match" in err


def test_a_torch_log_cannot_be_replayed_with_a_workload(log_path, workload_path, tmp_path,
                                                        capsys):
    lines = _lines(log_path)
    lines[0]["executor"] = "torch"
    rc, err = _replay(_write(tmp_path / "torch.jsonl", lines), workload_path, capsys)
    assert rc == 2 and "line 1, header: a torch run's results cannot be re-derived" in err, err
