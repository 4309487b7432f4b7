"""Text streams written zstd-compressed, and the bytes of a file that may be.

A decision log whose path ends ``.zst`` is written through
:func:`compressed_text`: each ``write`` is encoded and fed to one zstd
compressor as it comes (the memory held is the compressor's window, not the
log), and each ``flush`` ends the current zstd frame, so a flushed file is
always a whole zstd stream (one frame per flush; concatenated frames are one
stream to every zstd reader, ``zstd -d`` included). A stream nobody wrote to
since its last flush writes nothing more when flushed or closed, which lets
a forked child (the simulator's follower) write the frames of a stream its
parent opened: the parent flushes before the fork and writes nothing after.

:func:`decompressed` reads such a file's bytes back (any number of frames),
at most ``max_bytes`` of text (:func:`decompressed_chunks`: as a stream, a
chunk at a time); a reader tells a compressed file by its first
four bytes (:func:`is_compressed`), never by its name.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, TextIO, cast

import zstandard

COMPRESSED_SUFFIX = ".zst"
COMPRESSION_LEVEL = 3  # zstd's default: several times smaller than the text, at C speed
_MAGIC = b"\x28\xb5\x2f\xfd"  # a zstd frame's first bytes (RFC 8878)
_READ_CHUNK_BYTES = 1 << 20
# compressed bytes fed to a decompressor at a time: their text (several times
# more) is what a streaming reader holds at once
_FEED_BYTES = 1 << 12


class CompressedStreamError(ValueError):
    """The bytes are not a whole zstd stream, or decompress past the limit."""


def is_compressed_path(path: Path | str) -> bool:
    """``path`` names a file to write zstd-compressed (its suffix is ``.zst``)."""
    return Path(path).suffix == COMPRESSED_SUFFIX


def is_compressed(data: bytes) -> bool:
    """``data`` starts with a zstd frame."""
    return data[:4] == _MAGIC


def compressed_text(raw: BinaryIO, level: int = COMPRESSION_LEVEL) -> TextIO:
    """A text stream that writes UTF-8 to ``raw`` zstd-compressed. Closing
    it ends its frame and flushes ``raw`` but leaves ``raw`` open."""
    return cast(TextIO, _ZstdTextSink(raw, level))


class _ZstdTextSink(io.TextIOBase):
    def __init__(self, raw: BinaryIO, level: int) -> None:
        super().__init__()
        self._raw = raw
        self._compressor = zstandard.ZstdCompressor(level=level)
        self._frame: zstandard.ZstdCompressionObj | None = None  # open since the last flush

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self._frame is None:
            self._frame = self._compressor.compressobj()
        data = self._frame.compress(text.encode("utf-8"))
        if data:
            self._raw.write(data)
        return len(text)

    def flush(self) -> None:
        """End the open frame (if any was written to) and flush ``raw``."""
        if self._frame is not None:
            self._raw.write(self._frame.flush())
            self._frame = None
        self._raw.flush()

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        if not self.closed:
            self.flush()
        super().close()


def decompressed(data: bytes, max_bytes: int) -> bytes:
    """The text of the zstd stream ``data`` (every frame, in order);
    :class:`CompressedStreamError` if it is not one (a frame cut short,
    corrupt bytes, bytes after the last frame) or holds more than
    ``max_bytes``."""
    pieces = (data[offset:offset + _READ_CHUNK_BYTES]
              for offset in range(0, len(data), _READ_CHUNK_BYTES))
    return b"".join(decompressed_chunks(pieces, max_bytes))


def decompressed_chunks(pieces: Iterable[bytes], max_bytes: int) -> Iterator[bytes]:
    """The text of the zstd stream whose bytes come in ``pieces``, one chunk
    at a time as it decompresses (the memory held is a piece and the text of
    a few KiB of it, never the stream): the same text and errors as :func:`decompressed`,
    an error raised when the reader reaches it."""
    size = 0
    frame: zstandard.ZstdDecompressionObj | None = None
    try:
        for piece in _feeds(pieces):
            while piece:
                if frame is None:
                    frame = zstandard.ZstdDecompressor().decompressobj()
                chunk = frame.decompress(piece)
                size += len(chunk)
                if size > max_bytes:
                    raise CompressedStreamError(f"decompresses past the {max_bytes}-byte "
                                                "limit of an input file")
                if chunk:
                    yield chunk
                piece, frame = (frame.unused_data, None) if frame.eof else (b"", frame)
        if frame is not None:
            raise CompressedStreamError("not a whole zstd stream (its last frame is cut "
                                        "short)")
    except zstandard.ZstdError as exc:
        raise CompressedStreamError(f"not a whole zstd stream ({exc})") from None


def _feeds(pieces: Iterable[bytes]) -> Iterator[bytes]:
    for piece in pieces:
        for offset in range(0, len(piece), _FEED_BYTES):
            yield piece[offset:offset + _FEED_BYTES]
