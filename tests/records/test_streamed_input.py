"""Reading an input a piece at a time gives what reading it whole gives:
the lines of records.jsonl.split_lines are bytes.split's, the text of
compressed_text.decompressed_chunks is decompressed's (errors included),
and read_input_chunks joins to read_input_bytes."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iterserve.records.compressed_text import (
    CompressedStreamError,
    compressed_text,
    decompressed,
    decompressed_chunks,
)
from iterserve.records.input_files import read_input_bytes, read_input_chunks
from iterserve.records.jsonl import split_lines


class Refused(ValueError):
    pass


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(min(cut, len(data)) for cut in cuts), len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@given(st.lists(st.sampled_from([b"a", b"b", b"\n"]), max_size=60).map(b"".join),
       st.lists(st.integers(0, 60), max_size=6))
def test_split_lines_cuts_as_bytes_split(data: bytes, cuts: list[int]) -> None:
    assert list(split_lines(_cut(data, cuts), max_line_bytes=100)) == data.split(b"\n")


def test_a_long_line_comes_out_cut_past_the_limit_and_ends_the_lines() -> None:
    pieces = [b"ok\n", b"x" * 6, b"x" * 6, b"\nnever read\n"]
    assert list(split_lines(pieces, max_line_bytes=8)) == [b"ok", b"x" * 9]


def _zstd(*frames: str) -> bytes:
    raw = io.BytesIO()
    sink = compressed_text(raw)
    for text in frames:
        sink.write(text)
        sink.flush()  # one frame per flush
    return raw.getvalue()


@pytest.mark.parametrize("piece_bytes", [1, 7, 1 << 20])
def test_chunks_decompress_as_the_whole_stream(piece_bytes: int) -> None:
    data = _zstd("line one\n" * 500, "", "line two\n" * 3000, "end\n")
    pieces = _cut(data, list(range(piece_bytes, len(data), piece_bytes)))
    assert b"".join(decompressed_chunks(pieces, 1 << 30)) == decompressed(data, 1 << 30)
    assert decompressed(data, 1 << 30).decode() == ("line one\n" * 500 + "line two\n" * 3000
                                                    + "end\n")


@pytest.mark.parametrize(("data", "message"), [
    (_zstd("x" * 1000)[:-3], "its last frame is cut short"),
    (_zstd("x" * 1000) + b"junk", "not a whole zstd stream ("),
    (_zstd("x" * 1000, "y" * 1000), "decompresses past the 1500-byte limit"),
])
def test_chunks_raise_what_the_whole_stream_raises(data: bytes, message: str) -> None:
    with pytest.raises(CompressedStreamError, match=message.replace("(", r"\(")) as whole:
        decompressed(data, 1500)
    with pytest.raises(CompressedStreamError) as streamed:
        list(decompressed_chunks([data[:10], data[10:]], 1500))
    assert str(streamed.value) == str(whole.value)


def test_chunks_join_to_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "input"
    path.write_bytes(bytes(range(256)) * 1000)
    pieces = list(read_input_chunks(path, Refused, 1 << 20))
    assert len(pieces) > 1 and b"".join(pieces) == read_input_bytes(path, Refused, 1 << 20)
    with pytest.raises(Refused, match="256000 bytes, over the 1000-byte limit"):
        next(read_input_chunks(path, Refused, 1000))
