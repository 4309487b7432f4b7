"""Bad workload files: one line on stderr naming the field, exit status 2,
no traceback (cli/main.py contract; STYLE habit 7 for unknown policies)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from iterserve.cli.main import main
from iterserve.policies.registry import policy_names
from iterserve.records.workload import WorkloadError, load_workload, parse_workload

from .helpers import ABC_FIXTURE, REPO_ROOT

CLI = Path(sys.executable).with_name("iterserve")


def _abc() -> dict:
    return json.loads(ABC_FIXTURE.read_text())


def _drop_token_budget(w):
    del w["capacity"]["max_num_batched_tokens"]


def _zero_prompt(w):
    w["requests"][1]["prompt_tokens"] = 0


def _unknown_clock(w):
    w["clock"] = "fortnight"


def _duplicate_id(w):
    w["requests"][2]["request_id"] = "A"


def _hidden_for_unknown(w):
    w["fixture_only_hidden_truth"]["realized_output_tokens"]["ghost"] = 4


def _zero_budget(w):
    w["capacity"]["max_num_seqs"] = 0


def _string_arrival(w):
    w["requests"][0]["arrival"] = "soon"


def _extension_wait(value):
    def mutate(w):
        w["kv"] = {"num_kv_blocks": 64, "block_size": 4, "extension_wait_max_iterations": value}
    return mutate


CASES = {
    # name: (mutation, substrings the one-line message must contain)
    "missing-token-budget": (_drop_token_budget, ["capacity.max_num_batched_tokens", "missing"]),
    "prompt-tokens-zero": (_zero_prompt, ["requests[1]", "prompt_tokens"]),
    "unknown-clock": (_unknown_clock, ["clock", "fortnight", "iteration"]),
    "duplicate-request-id": (_duplicate_id, ["request_id", "'A'"]),
    "hidden-truth-unknown-request": (_hidden_for_unknown, ["realized_output_tokens", "ghost"]),
    "sequence-budget-zero": (_zero_budget, ["max_num_seqs"]),
    "arrival-not-a-number": (_string_arrival, ["requests[0].arrival"]),
    # the bound on 0x06's TEMPORARILY_UNAVAILABLE wait: an integer in [1, 2**20]
    "extension-wait-zero": (_extension_wait(0), ["kv.extension_wait_max_iterations", ">= 1"]),
    "extension-wait-not-an-integer": (_extension_wait("8"),
                                      ["kv.extension_wait_max_iterations"]),
    "extension-wait-boolean": (_extension_wait(True), ["kv.extension_wait_max_iterations"]),
    "extension-wait-past-limit": (_extension_wait((1 << 20) + 1),
                                  ["kv.extension_wait_max_iterations", "documented limit"]),
}


def _run(argv, capsys):
    capsys.readouterr()
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _assert_one_line_error(rc, err, needles):
    assert rc == 2
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert err.startswith("iterserve simulate: error:"), err
    for needle in needles:
        assert needle in err, (needle, err)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_workload_is_one_line_naming_the_field(name, tmp_path, capsys):
    mutate, needles = CASES[name]
    workload = copy.deepcopy(_abc())
    mutate(workload)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(workload))
    with pytest.raises(WorkloadError):
        load_workload(path)
    rc, out, err = _run(["simulate", "--workload", str(path), "--policy", "refill",
                         "--out", str(tmp_path / "out")], capsys)
    _assert_one_line_error(rc, err, needles)
    assert not (tmp_path / "out" / "report.json").exists()


def test_not_json_file(tmp_path, capsys):
    path = tmp_path / "broken.json"
    path.write_text('{"workload_id": "x", "clock": ')
    rc, _, err = _run(["simulate", "--workload", str(path), "--policy", "refill",
                       "--out", str(tmp_path / "out")], capsys)
    _assert_one_line_error(rc, err, ["broken.json", "not valid JSON"])


def test_missing_file(tmp_path, capsys):
    rc, _, err = _run(["simulate", "--workload", str(tmp_path / "absent.json"), "--policy",
                       "refill", "--out", str(tmp_path / "out")], capsys)
    _assert_one_line_error(rc, err, ["absent.json"])


def test_unknown_policy_lists_the_valid_ones(tmp_path, capsys):
    rc, _, err = _run(["simulate", "--workload", str(ABC_FIXTURE), "--policy", "fifo-magic",
                       "--out", str(tmp_path / "out")], capsys)
    _assert_one_line_error(rc, err, ["fifo-magic", *policy_names()])


def test_console_script_prints_no_traceback(tmp_path):
    """The installed entry point, in a real process, for one bad file."""
    path = tmp_path / "bad.json"
    workload = _abc()
    _unknown_clock(workload)
    path.write_text(json.dumps(workload))
    proc = subprocess.run([str(CLI), "simulate", "--workload", str(path), "--policy", "static",
                           "--out", str(tmp_path / "out")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "clock" in proc.stderr and proc.stdout == ""


# --- nested objects are strict; numbers are finite ---------------------------------
def _hidden_typo(w):
    w["fixture_only_hidden_truth"] = {"realised_output_tokens": {"A": 2, "B": 8, "C": 3}}


def _slo_typo(w):
    w["requests"][0]["slo"] = {"ttft": 250}


@pytest.mark.parametrize(("mutate", "needle"), [
    (_hidden_typo, "realised_output_tokens"), (_slo_typo, "ttft"),
], ids=["hidden-truth-key-typo", "slo-key-typo"])
def test_unknown_nested_field_is_rejected(mutate, needle):
    workload = _abc()
    mutate(workload)
    with pytest.raises(WorkloadError, match=needle):
        parse_workload(workload)


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_non_finite_arrival_is_rejected(value):
    """A NaN arrival is never <= the clock: accepted, it made simulate loop forever."""
    workload = _abc()
    workload["requests"][2]["arrival"] = value
    with pytest.raises(WorkloadError, match="arrival"):
        parse_workload(workload)


# --- --layer-offload (0x09B): refused at the boundary, nothing written ---------------
@pytest.mark.parametrize(("value", "needles"), [
    ("4,1", ["--layer-offload", "LAYERS,OFFLOADED,TRANSFER_MS"]),
    ("4,x,1.5", ["--layer-offload", "integers"]),
    ("4,1,fast", ["--layer-offload", "TRANSFER_MS", "fast"]),
    ("2,3,1.5", ["--layer-offload", "3 offloaded"]),
    ("0,0,1.5", ["--layer-offload", "0 layers"]),
    ("4,-1,1.5", ["--layer-offload", "-1 offloaded"]),
    ("4,1,nan", ["--layer-offload", "transfer_ms", "nan"]),
    ("4,1,inf", ["--layer-offload", "transfer_ms", "inf"]),
    ("4,1,-0.5", ["--layer-offload", "transfer_ms", "-0.5"]),
], ids=["two-fields", "not-integer", "not-number", "more-offloaded-than-layers", "no-layers",
        "negative-offloaded", "nan-transfer", "inf-transfer", "negative-transfer"])
def test_bad_layer_offload_is_one_line(value, needles, tmp_path, capsys):
    ms_workload = {**_abc(), "clock": "ms"}
    path = tmp_path / "ms.json"
    path.write_text(json.dumps(ms_workload))
    rc, _, err = _run(["simulate", "--workload", str(path), "--policy", "refill",
                       "--layer-offload", value, "--out", str(tmp_path / "out")], capsys)
    _assert_one_line_error(rc, err, needles)
    assert not (tmp_path / "out").exists()


def test_layer_offload_on_the_iteration_clock_is_one_line(tmp_path, capsys):
    rc, _, err = _run(["simulate", "--workload", str(ABC_FIXTURE), "--policy", "refill",
                       "--layer-offload", "4,1,1.5", "--out", str(tmp_path / "out")], capsys)
    _assert_one_line_error(rc, err, ["--layer-offload", "ms clock", "'iteration'"])
    assert not (tmp_path / "out").exists()
