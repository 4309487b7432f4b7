"""Per-request decoding controls (torch-free, so the server and records can use them)."""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_TOP_LOGPROBS = 20  # alternatives per token, as vLLM's default max_logprobs
MAX_PENALTY = 2.0  # |presence| and |frequency| penalties, as OpenAI bounds them


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Per-request decoding controls, validated on construction.

    temperature == 0 selects greedy decoding; top_k None and top_p 1.0 disable
    those filters. seed None means the engine supplies one from its injected
    RNG when the request is admitted (see SampleRow.seed).

    Penalties change the logits before greedy or random choice, with the
    semantics of OpenAI and transformers: ``presence_penalty`` and
    ``frequency_penalty`` subtract ``presence * [count > 0] + frequency *
    count`` over the *output* tokens so far; ``repetition_penalty`` (1.0 =
    none) divides positive and multiplies negative logits of every token seen
    in the prompt or the output. ``min_tokens`` masks the EOS and stop token
    ids until that many tokens were emitted. ``num_top_logprobs`` asks for
    that many most likely alternatives per emitted token (raw model
    distribution) besides the sampled token's logprob. ``prompt_logprobs``
    asks for the logprob (and as many alternatives) of every prompt token
    after the first; such a request computes its whole prompt, reading no
    prefix cache.
    """

    max_tokens: int = 16
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    logprobs: bool = False
    num_top_logprobs: int = 0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_tokens: int = 0
    prompt_logprobs: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        object.__setattr__(self, "stop", tuple(self.stop))
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be finite and >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1 or None, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.seed is not None and self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")
        if any(t < 0 for t in self.stop_token_ids):
            raise ValueError("stop_token_ids must be >= 0")
        self._check_penalties()
        if not 0 <= self.num_top_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"num_top_logprobs must be in [0, {MAX_TOP_LOGPROBS}], "
                             f"got {self.num_top_logprobs}")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens must be in [0, max_tokens={self.max_tokens}], "
                             f"got {self.min_tokens}")

    def _check_penalties(self) -> None:
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not (math.isfinite(value) and -MAX_PENALTY <= value <= MAX_PENALTY):
                raise ValueError(f"{name} must be in [-{MAX_PENALTY}, {MAX_PENALTY}], got {value}")
        if not (math.isfinite(self.repetition_penalty) and 0.0 < self.repetition_penalty <= 2.0):
            raise ValueError(f"repetition_penalty must be in (0, 2], got {self.repetition_penalty}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def has_penalties(self) -> bool:
        """Whether the logits change with the request's history."""
        return (self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
                or self.repetition_penalty != 1.0)

    @property
    def wants_logits_processing(self) -> bool:
        """Penalties or a min_tokens mask: the sampler must edit this row's logits."""
        return self.has_penalties or self.min_tokens > 0
