"""Per-request stop decisions and incremental detokenization.

`IncrementalDetokenizer` turns output tokens into text one token at a time and
answers two questions after each token: which new text is safe to show, and
has a stop string appeared. Visible text never includes a stop string or
anything after it, and text that could still become the start of a stop
string is held back until it cannot (or until the request finishes).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from iterserve.model.tokenizer import TextTokenizer
from iterserve.records.sampling_params import SamplingParams

_REPLACEMENT_CHAR = "\ufffd"
_NUM_CONTEXT_TOKENS = 5  # prompt tokens decoded with the output so leading spaces survive


class StopReason(enum.Enum):
    EOS = "eos"
    STOP_TOKEN = "stop_token"
    STOP_STRING = "stop_string"
    MAX_TOKENS = "max_tokens"


def token_stop_reason(
    token_id: int,
    num_output_tokens: int,
    params: SamplingParams,
    eos_token_ids: Sequence[int],
) -> StopReason | None:
    """Why generation ends at this token (token-level rules only), or None.

    `num_output_tokens` counts outputs including `token_id`; the first
    ``params.min_tokens`` outputs never stop on EOS or a stop token (the
    sampler masks them too).
    """
    if num_output_tokens > params.min_tokens:
        if not params.ignore_eos and token_id in eos_token_ids:
            return StopReason.EOS
        if token_id in params.stop_token_ids:
            return StopReason.STOP_TOKEN
    if num_output_tokens >= params.max_tokens:
        return StopReason.MAX_TOKENS
    return None


class IncrementalDetokenizer:
    """Decodes one request's output tokens and checks its stop strings.

    Decoding uses a sliding window of tokens (prefix/read offsets) so each step
    costs O(window), and waits while the text ends in U+FFFD (a multi-byte
    character split across tokens).
    """

    def __init__(
        self,
        tokenizer: TextTokenizer,
        stop: Sequence[str] = (),
        prompt_token_ids: Sequence[int] = (),
        skip_special_tokens: bool = True,
    ) -> None:
        self._tokenizer = tokenizer
        self._stop = tuple(stop)
        self._max_stop_chars = max((len(s) for s in self._stop), default=0)
        self._skip_special_tokens = skip_special_tokens
        self._token_ids = list(prompt_token_ids[-_NUM_CONTEXT_TOKENS:])
        self._prefix_offset = 0
        self._read_offset = len(self._token_ids)
        self._text = ""
        self._num_visible_chars = 0
        self.stop_string: str | None = None

    @property
    def text(self) -> str:
        """All visible text so far (never past a stop string)."""
        return self._text[: self._num_visible_chars]

    @property
    def is_stopped(self) -> bool:
        return self.stop_string is not None

    def push(self, token_id: int) -> str:
        """Add one output token; returns the newly visible text (may be empty)."""
        if self.is_stopped:
            raise ValueError("push after a stop string was found")
        if not self._stop:  # nothing to search for or hold back (the common case)
            self._text += self._decode_delta(token_id)
            return self._reveal(len(self._text))
        searched_from = max(0, len(self._text) - self._max_stop_chars + 1)
        self._text += self._decode_delta(token_id)
        self._truncate_at_stop(searched_from)
        visible = len(self._text) if self.is_stopped else len(self._text) - self._held_chars()
        return self._reveal(visible)

    def finish(self) -> str:
        """The request ended for another reason: release any held-back text."""
        return self._reveal(len(self._text))

    def _decode_delta(self, token_id: int) -> str:
        self._token_ids.append(token_id)
        decode = self._tokenizer.decode
        skip = self._skip_special_tokens
        prefix = decode(self._token_ids[self._prefix_offset : self._read_offset], skip)
        full = decode(self._token_ids[self._prefix_offset :], skip)
        if len(full) <= len(prefix) or full.endswith(_REPLACEMENT_CHAR):
            return ""
        self._prefix_offset, self._read_offset = self._read_offset, len(self._token_ids)
        return full[len(prefix) :]

    def _truncate_at_stop(self, searched_from: int) -> None:
        hits = [(self._text.find(s, searched_from), s) for s in self._stop]
        found = [(index, s) for index, s in hits if index >= 0]
        if found:
            index, stop = min(found)
            self._text = self._text[:index]
            self.stop_string = stop

    def _held_chars(self) -> int:
        """Length of the longest text suffix that is a proper prefix of a stop string."""
        for size in range(min(self._max_stop_chars - 1, len(self._text)), 0, -1):
            suffix = self._text[-size:]
            if any(s.startswith(suffix) for s in self._stop):
                return size
        return 0

    def _reveal(self, num_chars: int) -> str:
        num_chars = max(num_chars, self._num_visible_chars)
        delta = self._text[self._num_visible_chars : num_chars]
        self._num_visible_chars = num_chars
        return delta
