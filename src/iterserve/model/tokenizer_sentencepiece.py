"""A checkpoint whose tokenizer is only a sentencepiece `tokenizer.model`.

transformers' tokenizer classes (the one `tokenizer_config.json` names, or
the family's default from `config.json`) read the sentencepiece model and
convert it to a `tokenizers` tokenizer, the same object a `tokenizer.json`
gives, so `HFTokenizer` serves both alike. The conversion needs the
`sentencepiece` and `protobuf` packages and imports transformers, so it
runs only for a directory without `tokenizer.json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from iterserve.model.errors import CheckpointError, MissingCheckpointFileError

TOKENIZER_JSON = "tokenizer.json"
SENTENCEPIECE_MODEL = "tokenizer.model"


@dataclass(frozen=True, slots=True)
class ConvertedTokenizer:
    """The converted tokenizer and the special tokens transformers found for it."""

    tokenizer: Tokenizer
    bos_token: str | None
    eos_token: str | None


def from_sentencepiece(model_dir: Path) -> ConvertedTokenizer:
    """`model_dir/tokenizer.model` converted through transformers. Raises
    MissingCheckpointFileError naming both files looked for when it is absent,
    CheckpointError naming the file when transformers cannot read it."""
    path = model_dir / SENTENCEPIECE_MODEL
    if not path.is_file():
        raise MissingCheckpointFileError(
            str(model_dir / TOKENIZER_JSON),
            f"looked for {TOKENIZER_JSON}, then a sentencepiece {SENTENCEPIECE_MODEL}: "
            "neither is there")
    from transformers import AutoTokenizer

    try:
        converted = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        backend = converted.backend_tokenizer
    except Exception as exc:  # ImportError, ValueError, OSError, protobuf's DecodeError...
        message = " ".join(str(exc).split())[:200]
        raise CheckpointError(f"{path}: transformers cannot read this sentencepiece tokenizer "
                              f"({type(exc).__name__}: {message})") from None
    if not isinstance(backend, Tokenizer):
        raise CheckpointError(f"{path}: transformers gave no tokenizers.Tokenizer for it")
    return ConvertedTokenizer(backend, _token(converted.bos_token), _token(converted.eos_token))


def _token(value: object) -> str | None:
    return value if isinstance(value, str) else None
