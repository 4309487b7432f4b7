"""Registry of random-weight model presets written by `make_model`.

`tiny` keeps the model test suite fast; `small` (~100M parameters) is sized
for benchmarks. Unknown names raise and list the valid ones (STYLE habit 7).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelPreset:
    """Shape of a Llama-architecture checkpoint; `max_vocab_size` caps the tokenizer."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    max_vocab_size: int
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    init_std: float = 0.02

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(f"preset {self.name!r}: heads do not divide the hidden size")


PRESETS: dict[str, ModelPreset] = {
    preset.name: preset
    for preset in (
        ModelPreset(
            name="tiny",
            num_layers=4,
            hidden_size=256,
            num_heads=8,
            num_kv_heads=2,
            intermediate_size=688,
            max_vocab_size=2048,
        ),
        ModelPreset(
            name="small",
            num_layers=8,
            hidden_size=1024,
            num_heads=16,
            num_kv_heads=4,
            intermediate_size=2816,
            max_vocab_size=4096,
            tie_word_embeddings=True,
        ),
    )
}


def get_preset(name: str) -> ModelPreset:
    """Look a preset up by name; raises ValueError naming the valid presets."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(
            f"unknown model preset {name!r}; valid presets: {', '.join(sorted(PRESETS))}"
        ) from None
