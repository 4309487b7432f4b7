"""Text tokenizers: the real one read from a model directory, and a fake.

`HFTokenizer` uses the Rust `tokenizers` library directly (fast, no
transformers import) and touches transformers only to render a Jinja chat
template. `FakeTokenizer` is byte-level and needs no files, so other layers
test text paths without a checkpoint (STYLE habit 6: every backend ships a fake).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from tokenizers import Tokenizer

from iterserve.model.errors import CheckpointError
from iterserve.model.tokenizer_sentencepiece import from_sentencepiece

ChatMessage = Mapping[str, str]


class TextTokenizer(Protocol):
    """What the engine and server need from a tokenizer."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def bos_token_id(self) -> int | None: ...

    @property
    def eos_token_ids(self) -> tuple[int, ...]: ...

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...

    def apply_chat_template(
        self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True
    ) -> list[int]: ...


class HFTokenizer:
    """A `tokenizer.json` tokenizer plus the special tokens and chat template of its directory."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        model_dir: Path,
        bos_token_id: int | None,
        eos_token_ids: tuple[int, ...],
        chat_template: str | None,
    ) -> None:
        self._tokenizer = tokenizer
        self._model_dir = model_dir
        self._bos_token_id = bos_token_id
        self._eos_token_ids = eos_token_ids
        self._chat_template = chat_template
        self._chat_renderer: Any = None

    @property
    def vocab_size(self) -> int:
        return int(self._tokenizer.get_vocab_size())

    @property
    def chat_template(self) -> str | None:
        return self._chat_template

    @property
    def bos_token_id(self) -> int | None:
        return self._bos_token_id

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self._eos_token_ids

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return str(self._tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens))

    def apply_chat_template(
        self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True
    ) -> list[int]:
        """Render the directory's Jinja chat template (via transformers, loaded once) and encode it."""
        if self._chat_template is None:
            raise ValueError(f"{self._model_dir} declares no chat_template")
        if self._chat_renderer is None:
            from transformers import AutoTokenizer  # only chat rendering needs transformers

            self._chat_renderer = AutoTokenizer.from_pretrained(self._model_dir,
                                                                local_files_only=True)
        from jinja2 import TemplateError

        try:
            text = self._chat_renderer.apply_chat_template(
                [dict(m) for m in messages], tokenize=False,
                add_generation_prompt=add_generation_prompt, chat_template=self._chat_template)
        except TemplateError as exc:  # the template's own raise_exception, or a syntax error
            raise ValueError(f"the chat template failed: {exc}") from None
        return self.encode(str(text), add_special_tokens=False)


def load_tokenizer(model_dir: Path | str, chat_template: str | None = None) -> HFTokenizer:
    """Read `tokenizer.json` (else a sentencepiece `tokenizer.model`, converted
    through transformers) and the special tokens declared beside it.

    The chat template is ``chat_template`` when given (``--chat-template``),
    else read as transformers 5 reads it: ``chat_template.jinja`` beside the
    tokenizer wins over ``tokenizer_config.json``'s ``chat_template`` (a
    string, or a list of named templates whose ``default`` is used).
    """
    model_dir = Path(model_dir)
    tokenizer_path = model_dir / "tokenizer.json"
    settings = _optional_json(model_dir / "tokenizer_config.json")
    if tokenizer_path.is_file():
        tokenizer = _read_tokenizer_json(tokenizer_path)
    else:
        converted = from_sentencepiece(model_dir)
        tokenizer = converted.tokenizer
        settings = {"bos_token": converted.bos_token, "eos_token": converted.eos_token} | settings
    bos_id = _special_id(tokenizer, settings.get("bos_token"))
    eos_ids = [_special_id(tokenizer, settings.get("eos_token"))]
    for name in ("generation_config.json", "config.json"):
        eos_ids.extend(_as_ids(_optional_json(model_dir / name).get("eos_token_id")))
    unique_eos = tuple(dict.fromkeys(i for i in eos_ids if i is not None))
    template = chat_template if chat_template is not None else _directory_template(
        model_dir, settings)
    return HFTokenizer(tokenizer, model_dir, bos_id, unique_eos, template)


CHAT_TEMPLATE_FILE = "chat_template.jinja"


def _directory_template(model_dir: Path, settings: Mapping[str, Any]) -> str | None:
    path = model_dir / CHAT_TEMPLATE_FILE
    if path.is_file():
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CheckpointError(f"{path} is unreadable: {type(error).__name__}") from None
    template = settings.get("chat_template")
    if isinstance(template, list):  # [{"name": ..., "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def _read_tokenizer_json(path: Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the tokenizers library raises a bare Exception
        message = " ".join(str(exc).split())[:200]
        raise CheckpointError(f"{path}: not a readable tokenizer ({message})") from None


class FakeTokenizer:
    """Byte-level tokenizer with no files: ids 0-255 are bytes, then BOS and EOS.

    decode() replaces invalid UTF-8, so a partial multi-byte character shows up
    as U+FFFD until its remaining bytes arrive (as with real byte-level BPE).
    """

    BOS_ID = 256
    EOS_ID = 257

    @property
    def vocab_size(self) -> int:
        return 258

    @property
    def bos_token_id(self) -> int | None:
        return self.BOS_ID

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return (self.EOS_ID,)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        prefix = [self.BOS_ID] if add_special_tokens else []
        return prefix + list(text.encode("utf-8"))

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        pieces: list[str] = []
        data = bytearray()
        for token_id in token_ids:
            if token_id < 256:
                data.append(token_id)
                continue
            pieces.append(data.decode("utf-8", errors="replace"))
            data.clear()
            if not skip_special_tokens:
                pieces.append("<bos>" if token_id == self.BOS_ID else "<eos>")
        pieces.append(data.decode("utf-8", errors="replace"))
        return "".join(pieces)

    def apply_chat_template(
        self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True
    ) -> list[int]:
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
        if add_generation_prompt:
            text += "assistant: "
        return self.encode(text)


def _optional_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, OSError, RecursionError, ValueError) as error:
        raise CheckpointError(f"{path} is unreadable: {type(error).__name__}") from None
    return payload if isinstance(payload, dict) else {}


def _special_id(tokenizer: Tokenizer, token: Any) -> int | None:
    if isinstance(token, dict):  # {"content": "<s>", ...} form
        token = token.get("content")
    if not isinstance(token, str):
        return None
    token_id = tokenizer.token_to_id(token)
    return None if token_id is None else int(token_id)


def _as_ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, list):
        return [int(v) for v in value]
    return [int(value)]
