"""Configs shaped like the published checkpoints of each family (keys and values
as their config.json files state them, weights not needed) resolve to the
layer transformers would run: windows per layer, RoPE per layer type, soft
caps, experts, LongRoPE's length bound."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from iterserve.model.loader import load_config
from iterserve.model.variant import DecoderVariant

GEMMA2_2B = {
    "architectures": ["Gemma2ForCausalLM"], "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304, "intermediate_size": 9216,
    "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 8,
    "num_hidden_layers": 26, "num_key_value_heads": 4, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096,
    "torch_dtype": "float32", "vocab_size": 256000, "eos_token_id": [1, 107],
}
GEMMA3_1B = {
    "architectures": ["Gemma3ForCausalLM"], "attn_logit_softcapping": None,
    "final_logit_softcapping": None, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 1152, "intermediate_size": 6912, "max_position_embeddings": 32768,
    "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 26,
    "num_key_value_heads": 1, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000, "rope_scaling": None, "rope_theta": 1000000,
    "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
    "vocab_size": 262144,
}
#: the 4B image-text release: its text_config states only what differs from the defaults
GEMMA3_4B = {
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "eos_token_id": [1, 106], "torch_dtype": "bfloat16", "mm_tokens_per_image": 256,
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
                    "model_type": "gemma3_text", "num_hidden_layers": 34,
                    "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "vision_config": {"hidden_size": 1152, "image_size": 896, "model_type": "siglip_vision_model",
                      "num_hidden_layers": 27, "patch_size": 14},
}
PHI3_MINI_128K = {
    "architectures": ["Phi3ForCausalLM"], "bos_token_id": 1, "eos_token_id": 32000,
    "hidden_act": "silu", "hidden_size": 3072, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "model_type": "phi3", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
    "pad_token_id": 32000, "rms_norm_eps": 1e-05,
    "rope_scaling": {"long_factor": [1.0 + i / 8 for i in range(48)],
                     "short_factor": [1.0 + i / 64 for i in range(48)], "type": "longrope"},
    "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 32064,
}
PHI4_MINI = {
    **PHI3_MINI_128K, "num_attention_heads": 24, "num_key_value_heads": 8,
    "partial_rotary_factor": 0.75, "tie_word_embeddings": True, "vocab_size": 200064,
}
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "decoder_sparse_step": 1, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
    "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
    "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": True,
    "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 48, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": None,
    "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936,
}
QWEN15_MOE_A27B = {
    "architectures": ["Qwen2MoeForCausalLM"], "decoder_sparse_step": 1, "hidden_size": 2048,
    "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21,
    "model_type": "qwen2_moe", "moe_intermediate_size": 1408, "norm_topk_prob": False,
    "num_attention_heads": 16, "num_experts": 60, "num_experts_per_tok": 4,
    "num_hidden_layers": 24, "num_key_value_heads": 16, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "shared_expert_intermediate_size": 5632, "sliding_window": 32768,
    "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936,
}
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 32000,
}


def _load(raw: dict[str, Any], tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps(raw))
    return load_config(tmp_path)


def test_gemma2_alternates_windows_and_soft_caps(tmp_path: Path) -> None:
    config = _load(GEMMA2_2B, tmp_path)
    assert config.sliding_windows == (4096, None) * 13
    assert (config.variant.attn_logit_softcap, config.variant.final_logit_softcap) == (50.0, 30.0)
    assert config.variant.attention_scale == 256 ** -0.5
    assert config.tie_word_embeddings  # Gemma's default, unstated in its config.json
    assert config.eos_token_ids == (1, 107)


def test_gemma3_every_sixth_layer_is_global_with_its_own_rope_base(tmp_path: Path) -> None:
    config = _load(GEMMA3_1B, tmp_path)
    assert config.sliding_windows == tuple(None if (i + 1) % 6 == 0 else 512 for i in range(26))
    assert config.variant.local_rope_layers == tuple(w is not None for w in
                                                     config.sliding_windows)
    assert config.rope_theta == 1e6 and config.variant.local_rope_inv_freq[1] == pytest.approx(
        10000 ** (-2 / 256))
    assert config.qk_norm and config.variant.attn_logit_softcap is None


def test_gemma3_image_text_release_loads_its_language_model_config(tmp_path: Path) -> None:
    config = _load(GEMMA3_4B, tmp_path)
    assert config.architecture == "Gemma3ForCausalLM"
    assert (config.num_layers, config.hidden_size, config.num_heads, config.num_kv_heads,
            config.head_dim) == (34, 2560, 8, 4, 256)  # transformers' Gemma 3 defaults
    assert config.rope_type == "linear"  # the global layers' scaled RoPE
    assert config.rope_inv_freq[0] == pytest.approx(1 / 8)
    assert config.variant.local_rope_inv_freq[0] == 1.0  # the local layers' plain RoPE
    assert config.torch_dtype == "bfloat16" and config.eos_token_ids == (1, 106)


def test_phi3_longrope_is_served_up_to_its_original_length(tmp_path: Path) -> None:
    config = _load(PHI3_MINI_128K, tmp_path)
    assert config.rope_type == "longrope" and config.max_position_embeddings == 4096
    assert config.rope_inv_freq[1] == pytest.approx(1 / ((1 + 1 / 64) * 10000 ** (2 / 96)))
    assert config.rope_attention_scaling > 1.0  # sqrt(1 + ln(32) / ln(4096))
    assert config.sliding_windows == (262144,) * 32
    assert config.variant == DecoderVariant()  # the Llama layer once its tensors are split


def test_phi3_legacy_su_rope_reads_as_longrope(tmp_path: Path) -> None:
    legacy = {**PHI3_MINI_128K, "rope_scaling": {**PHI3_MINI_128K["rope_scaling"], "type": "su"}}
    config = _load(legacy, tmp_path)
    assert config.rope_type == "longrope"
    assert config.rope_inv_freq == _load(PHI3_MINI_128K, tmp_path).rope_inv_freq


def test_qwen3_moe_routes_every_layer(tmp_path: Path) -> None:
    config = _load(QWEN3_30B_A3B, tmp_path)
    moe = config.variant.moe
    assert moe is not None and moe.sparse_layers == (True,) * 48
    assert (moe.num_experts, moe.num_experts_per_token, moe.expert_intermediate_size) == (
        128, 8, 768)
    assert moe.normalize_top_k and config.qk_norm
    assert config.sliding_windows == (None,) * 48


def test_qwen2_moe_adds_a_shared_expert_and_keeps_top_k_weights(tmp_path: Path) -> None:
    config = _load(QWEN15_MOE_A27B, tmp_path)
    moe = config.variant.moe
    assert moe is not None and moe.sparse_layers == (True,) * 24
    assert (moe.num_experts, moe.num_experts_per_token, moe.shared_expert_intermediate_size) == (
        60, 4, 5632)
    assert not moe.normalize_top_k and not config.qk_norm
    assert config.sliding_windows == (None,) * 24  # use_sliding_window is false


def test_mixtral_routes_top_two_of_eight(tmp_path: Path) -> None:
    moe = _load(MIXTRAL_8X7B, tmp_path).variant.moe
    assert moe is not None
    assert (moe.num_experts, moe.num_experts_per_token, moe.expert_intermediate_size) == (
        8, 2, 14336)
    assert moe.normalize_top_k


@pytest.mark.parametrize(("change", "words"), [
    ({"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ({"hidden_activation": "relu"}, "hidden_activation='relu'"),
])
def test_gemma_features_outside_the_forward_are_refused(change: dict[str, Any], words: str,
                                                       tmp_path: Path) -> None:
    from iterserve.model.errors import UnsupportedConfigError

    with pytest.raises(UnsupportedConfigError, match=words):
        _load({**GEMMA3_1B, **change}, tmp_path)


def test_phi4_mini_rotates_three_quarters_of_each_head(tmp_path: Path) -> None:
    config = _load(PHI4_MINI, tmp_path)
    assert (config.head_dim, config.rotary_dim) == (128, 96)
    assert len(config.rope_inv_freq) == 48 and config.max_position_embeddings == 4096
    assert config.tie_word_embeddings


def test_partial_rotary_is_refused_where_transformers_rotates_whole_heads(tmp_path) -> None:
    from iterserve.model.errors import UnsupportedConfigError

    with pytest.raises(UnsupportedConfigError, match="partial_rotary_factor=0.5 is not "
                                                     "implemented for MixtralForCausalLM"):
        _load({**MIXTRAL_8X7B, "partial_rotary_factor": 0.5}, tmp_path)


@pytest.mark.parametrize(("base", "change", "words"), [
    (GEMMA2_2B, {"query_pre_attn_scalar": 0}, "query_pre_attn_scalar=0"),
    (GEMMA2_2B, {"sliding_window": -5}, "sliding_window"),
    (GEMMA2_2B, {"attn_logit_softcapping": "x"}, "attn_logit_softcapping"),
    (GEMMA3_1B, {"rope_local_base_freq": "x"}, "could not convert"),
    (GEMMA3_1B, {"layer_types": ["full_attention"]}, "one entry per layer"),
    (QWEN3_30B_A3B, {"decoder_sparse_step": 0}, "decoder_sparse_step=0"),
    (QWEN3_30B_A3B, {"moe_intermediate_size": 0}, "intermediate size 0"),
    (MIXTRAL_8X7B, {"num_experts_per_tok": 9}, "num_experts_per_tok=9"),
    (PHI3_MINI_128K, {"partial_rotary_factor": 2}, "rotary dimension 192"),
    (GEMMA3_4B, {"text_config": "x"}, "no text_config"),
])
def test_a_bad_family_value_is_one_checkpoint_error_naming_it(base: dict[str, Any],
                                                             change: dict[str, Any], words: str,
                                                             tmp_path: Path) -> None:
    from iterserve.model.errors import CheckpointError

    with pytest.raises(CheckpointError, match=words):
        _load({**base, **change}, tmp_path)
