"""Output files written only onto regular files and committed whole; input
files read with a limit; a workload that can never run refused before the
run (cli/output_files.py, records/input_files.py, plan/feasibility.py).
Each case: one line, exit 2, and nothing lost or overwritten."""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from pathlib import Path

import pytest

from iterserve.cli.main import main
from iterserve.cli.output_files import OutputFileError, pending_file

SMALL_KV = Path(__file__).resolve().parents[2] / "examples" / "small_kv.json"


def _workload(tmp_path: Path, prompt_tokens: int = 8, num_blocks: int = 8) -> Path:
    doc = {"workload_id": "w", "clock": "iteration",
           "capacity": {"max_num_batched_tokens": 64, "max_num_seqs": 4},
           "kv": {"num_kv_blocks": num_blocks, "block_size": 4},
           "requests": [{"request_id": f"r{i}", "arrival": float(i),
                         "prompt_tokens": prompt_tokens, "max_output_tokens": 2}
                        for i in range(5)],
           "fixture_only_hidden_truth": {
               "realized_output_tokens": {f"r{i}": 2 for i in range(5)}}}
    path = tmp_path / "workload.json"
    path.write_text(json.dumps(doc))
    return path


def _simulate(workload: Path, out: Path, *flags: str) -> list[str]:
    return ["simulate", "--no-plots", "--log-process", "off", "--workload", str(workload),
            "--policy", "vllm", "--out", str(out), *flags]


def _one_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err, captured.err
    return captured.err


def test_the_workload_fixture_runs(tmp_path, capsys) -> None:
    assert main(_simulate(_workload(tmp_path), tmp_path / "out")) == 0
    assert (tmp_path / "out" / "report.json").is_file()


@pytest.mark.parametrize("target", ["/dev/full", "/dev/null", "link-to-device", "directory"])
def test_a_decision_log_onto_a_device_or_directory_is_refused(target, tmp_path, capsys) -> None:
    path = Path(target)
    if target == "link-to-device":
        path = tmp_path / "log.jsonl"
        path.symlink_to("/dev/full")
    elif target == "directory":
        path = tmp_path / "dir"
        path.mkdir()
    before = os.stat(path).st_mode
    out = tmp_path / "out"
    assert main(_simulate(_workload(tmp_path), out, "--decision-log", str(path))) == 2
    err = _one_line(capsys)
    assert "not a regular file" in err or "is a directory" in err
    assert os.stat(path).st_mode == before  # the device node (or directory) is still one
    assert not out.exists()


def test_a_target_swapped_for_a_device_link_during_the_run_is_not_replaced(tmp_path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("old\n")
    with pytest.raises(OutputFileError, match="not a regular file"), \
            pending_file(path, "--decision-log") as stream:
        stream.write("new\n")
        path.unlink()
        path.symlink_to("/dev/null")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert path.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["log.jsonl"]


def test_a_simulate_that_fails_while_writing_leaves_out_as_it_was(tmp_path, capsys,
                                                                   monkeypatch) -> None:
    from iterserve.cli import simulate

    workload = _workload(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text("the previous run\n")
    (out / "notes.txt").write_text("mine\n")
    log = tmp_path / "decisions.jsonl"
    log.write_text("the previous log\n")

    def full_disk(stream, report, encoded) -> None:
        stream.write(b"{\"half\": ")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(simulate, "write_sorted_json", full_disk)
    assert main(_simulate(workload, out, "--decision-log", str(log))) == 2
    assert "No space left on device" in _one_line(capsys)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "report.json"]
    assert (out / "report.json").read_text() == "the previous run\n"
    assert log.read_text() == "the previous log\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decisions.jsonl", "out",
                                                          "workload.json"]  # no staging left


def test_a_failed_simulate_into_a_new_directory_makes_none(tmp_path, capsys,
                                                           monkeypatch) -> None:
    from iterserve.cli import simulate

    def full_disk(*args, **kwargs) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(simulate, "write_sorted_json", full_disk)
    assert main(_simulate(_workload(tmp_path), tmp_path / "new" / "out")) == 2
    _one_line(capsys)
    assert not (tmp_path / "new" / "out").exists()
    assert not any(p.name.startswith(".out.") for p in (tmp_path / "new").iterdir())


def test_a_workload_whose_every_prompt_exceeds_the_pool_is_refused(tmp_path, capsys) -> None:
    workload = _workload(tmp_path, prompt_tokens=40, num_blocks=8)  # 10 blocks > 8
    out = tmp_path / "out"
    argv = _simulate(workload, out)
    argv[argv.index("vllm")] = "refill"
    assert main(argv) == 2
    err = _one_line(capsys)
    assert "no request can ever run" in err and "the pool has 8" in err
    assert not out.exists()


@pytest.mark.parametrize("command", ["simulate", "replay", "workload-spec"])
def test_an_endless_device_is_refused_before_it_is_read(command, tmp_path, capsys) -> None:
    argv = {"simulate": _simulate(Path("/dev/zero"), tmp_path / "out"),
            "replay": ["replay", "/dev/zero"],
            "workload-spec": ["workload", "gen", "/dev/zero", "-o", str(tmp_path / "w.json")],
            }[command]
    assert main(argv) == 2
    err = _one_line(capsys)
    assert "/dev/zero" in err and "device" in err
    assert list(tmp_path.iterdir()) == []


def test_an_input_over_the_limit_is_refused_from_its_size_or_while_read(tmp_path, capsys,
                                                                          monkeypatch) -> None:
    import iterserve.records.workload as workload_module

    monkeypatch.setattr(workload_module, "MAX_DOCUMENT_BYTES", 100)
    big = _workload(tmp_path)
    assert main(_simulate(big, tmp_path / "out")) == 2
    assert "over the 100-byte limit" in _one_line(capsys)
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)

    def endless_writer() -> None:
        try:
            with fifo.open("wb") as stream:
                while True:
                    stream.write(b" " * 4096)
        except BrokenPipeError:
            pass

    writer = threading.Thread(target=endless_writer, daemon=True)
    writer.start()
    assert main(_simulate(fifo, tmp_path / "out")) == 2
    assert "more than the 100-byte limit" in _one_line(capsys)
    writer.join(timeout=10)
    assert not (tmp_path / "out").exists()
