"""The streamed server logs roll over by size: whole writes only, the
segments oldest first join to what was written, the oldest past the
backups are deleted, and bad sizes are refused at the flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from iterserve.cli.rotating_file import RotatingTextFile


def _lines(num: int) -> list[str]:
    return [f'{{"line":{i},"pad":"{"x" * (i % 13)}"}}\n' for i in range(num)]


def _segments(sink: RotatingTextFile) -> list[Path]:
    """Oldest first."""
    return [p for p in (sink.segment(i) for i in range(sink.max_backups, -1, -1)) if p.exists()]


def test_segments_hold_whole_writes_and_join_to_what_was_written(tmp_path: Path) -> None:
    sink = RotatingTextFile(tmp_path / "log.jsonl", max_bytes=200, max_backups=100)
    lines = _lines(60)
    for i in range(0, 60, 3):  # a write of three lines is never split
        sink.write("".join(lines[i:i + 3]))
    sink.close()
    segments = _segments(sink)
    assert sink.num_rollovers == len(segments) - 1 >= 5
    assert all(p.stat().st_size <= 200 for p in segments)
    assert b"".join(p.read_bytes() for p in segments) == "".join(lines).encode()
    for path in segments:
        assert path.read_text().count("\n") % 3 == 0


def test_a_write_larger_than_the_limit_is_one_file_of_its_own(tmp_path: Path) -> None:
    sink = RotatingTextFile(tmp_path / "log", max_bytes=10, max_backups=5)
    sink.write("a" * 25 + "\n")
    sink.write("b\n")
    sink.close()
    assert (tmp_path / "log.1").read_text() == "a" * 25 + "\n"
    assert (tmp_path / "log").read_text() == "b\n"


def test_the_oldest_past_the_backups_is_deleted(tmp_path: Path) -> None:
    sink = RotatingTextFile(tmp_path / "log", max_bytes=4, max_backups=2)
    for word in ("one\n", "two\n", "six\n", "ten\n"):
        sink.write(word)
    sink.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log", "log.1", "log.2"]
    assert [p.read_text() for p in _segments(sink)] == ["two\n", "six\n", "ten\n"]
    none_kept = RotatingTextFile(tmp_path / "solo", max_bytes=4, max_backups=0)
    none_kept.write("one\n")
    none_kept.write("two\n")
    none_kept.close()
    assert (tmp_path / "solo").read_text() == "two\n"
    assert not (tmp_path / "solo.1").exists()


def test_without_a_limit_nothing_rolls_over_and_a_previous_file_is_replaced(tmp_path):
    path = tmp_path / "log"
    path.write_text("a previous run\n")
    sink = RotatingTextFile(path)
    sink.write("x" * 10_000)
    sink.close()
    assert path.read_text() == "x" * 10_000 and sink.num_rollovers == 0


@pytest.mark.parametrize(("max_bytes", "max_backups"), [(0, 1), (-5, 1), (10, -1)])
def test_bad_sizes_raise(tmp_path: Path, max_bytes: int, max_backups: int) -> None:
    with pytest.raises(ValueError):
        RotatingTextFile(tmp_path / "log", max_bytes, max_backups)


@pytest.mark.parametrize(("flag", "value"), [("--log-max-bytes", "0"), ("--log-backups", "-1")])
def test_serve_refuses_a_bad_rotation_flag_in_one_line(tmp_path, capsys, flag, value) -> None:
    from iterserve.cli import main as cli_main

    status = cli_main.main(["serve", str(tmp_path / "model"), flag, value])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and flag in err, err


def test_a_failed_write_ends_the_log_once_without_raising(tmp_path, caplog) -> None:
    """A full disk must not stop the server: the log ends at the failure,
    one error names the file, later writes are dropped."""
    sink = RotatingTextFile(tmp_path / "log", label="--event-log")

    class _FullDisk:
        def write(self, data: bytes) -> int:
            raise OSError(28, "No space left on device")

        def flush(self) -> None:
            pass

        def close(self) -> None:
            pass

    sink.write("kept\n")
    sink.flush()
    sink._file.close()
    sink._file = _FullDisk()  # type: ignore[assignment]
    with caplog.at_level("ERROR", logger="iterserve"):
        sink.write("lost\n")
        sink.write("dropped\n")
        sink.close()
    assert sink.error is not None and sink.error.errno == 28
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "--event-log" in errors[0].getMessage()
    assert (tmp_path / "log").read_text() == "kept\n"
