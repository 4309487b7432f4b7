"""Writes a random-weight Llama checkpoint plus a locally trained tokenizer.

The directory is a regular Hugging Face checkpoint: `transformers` loads it
offline with `AutoModelForCausalLM.from_pretrained(dir)` and
`AutoTokenizer.from_pretrained(dir)`. The same (preset, seed) always writes the
same weights and tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from iterserve.model.presets import ModelPreset, get_preset
from iterserve.model.tokenizer_build import (
    BOS_TOKEN,
    EOS_TOKEN,
    TURN_END_TOKEN,
    build_tokenizer,
    special_token_id,
    tokenizer_config,
)


def cached_model(out_dir: Path, preset: str = "tiny", seed: int = 0) -> Path:
    """`out_dir` holding the preset's checkpoint: made there on the first call
    (when it has no `model.safetensors`), reused after."""
    out_dir = Path(out_dir)
    if not (out_dir / "model.safetensors").is_file():
        make_model(out_dir, preset=preset, seed=seed)
    return out_dir


def make_model(out_dir: Path, preset: str = "tiny", seed: int = 0) -> Path:
    """Write `config.json`, `model.safetensors`, `generation_config.json` and the
    tokenizer files for `preset` into `out_dir`; returns `out_dir`."""
    spec = get_preset(preset)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec.max_vocab_size)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    _write_json(out_dir / "tokenizer_config.json", tokenizer_config(spec.max_position_embeddings))
    bos_id = special_token_id(tokenizer, BOS_TOKEN)
    eos_id = special_token_id(tokenizer, EOS_TOKEN)
    turn_end_id = special_token_id(tokenizer, TURN_END_TOKEN)
    vocab_size = tokenizer.get_vocab_size()
    _write_json(out_dir / "config.json", llama_config_json(spec, vocab_size, bos_id, eos_id))
    _write_json(
        out_dir / "generation_config.json",
        {"bos_token_id": bos_id, "eos_token_id": [eos_id, turn_end_id], "do_sample": False},
    )
    save_file(
        random_llama_weights(spec, vocab_size, seed),
        str(out_dir / "model.safetensors"),
        metadata={"format": "pt"},
    )
    return out_dir


def llama_config_json(
    spec: ModelPreset, vocab_size: int, bos_token_id: int, eos_token_id: int
) -> dict[str, Any]:
    """A `config.json` mapping for the Llama architecture."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.hidden_size // spec.num_heads,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": spec.rms_norm_eps,
        "rope_theta": spec.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "torch_dtype": "float32",
        "use_cache": True,
    }


def random_llama_weights(spec: ModelPreset, vocab_size: int, seed: int) -> dict[str, torch.Tensor]:
    """Seeded random tensors under Hugging Face Llama parameter names.

    Norm weights are perturbed around 1 so that a loader which ignores them is
    caught by the reference comparison.
    """
    generator = torch.Generator().manual_seed(seed)
    head_dim = spec.hidden_size // spec.num_heads
    q_size, kv_size = spec.num_heads * head_dim, spec.num_kv_heads * head_dim

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=generator) * spec.init_std

    def norm_weight() -> torch.Tensor:
        return 1.0 + 0.1 * torch.randn(spec.hidden_size, generator=generator)

    tensors = {"model.embed_tokens.weight": normal(vocab_size, spec.hidden_size)}
    for i in range(spec.num_layers):
        prefix = f"model.layers.{i}"
        tensors |= {
            f"{prefix}.input_layernorm.weight": norm_weight(),
            f"{prefix}.self_attn.q_proj.weight": normal(q_size, spec.hidden_size),
            f"{prefix}.self_attn.k_proj.weight": normal(kv_size, spec.hidden_size),
            f"{prefix}.self_attn.v_proj.weight": normal(kv_size, spec.hidden_size),
            f"{prefix}.self_attn.o_proj.weight": normal(spec.hidden_size, q_size),
            f"{prefix}.post_attention_layernorm.weight": norm_weight(),
            f"{prefix}.mlp.gate_proj.weight": normal(spec.intermediate_size, spec.hidden_size),
            f"{prefix}.mlp.up_proj.weight": normal(spec.intermediate_size, spec.hidden_size),
            f"{prefix}.mlp.down_proj.weight": normal(spec.hidden_size, spec.intermediate_size),
        }
    tensors["model.norm.weight"] = norm_weight()
    if not spec.tie_word_embeddings:
        tensors["lm_head.weight"] = normal(vocab_size, spec.hidden_size)
    return {name: tensor.contiguous() for name, tensor in tensors.items()}


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
