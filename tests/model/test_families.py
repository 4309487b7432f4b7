"""Gemma, Gemma 2, Gemma 3 (text, and the language model of an image-text
checkpoint), Phi-3, Phi-4 mini (partial rotary), Qwen3-MoE, Qwen2-MoE and
Mixtral checkpoints written by transformers load and match its reference:
float32 logits on random packed mixes (tight), bfloat16 logits (loose, and
the same greedy choice wherever the reference's choice is clear), greedy
tokens through the engine; each family feature is load-bearing (turning it
off breaks the match); a damaged tensor is one error naming it. Architectures
the packed forward does not implement are refused naming themselves."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest
import torch
from family_checkpoints import FAMILIES, build, reference
from model_helpers import BlockHandout, assert_random_mix_matches, reference_logits, run_segments

from iterserve.model.errors import UnsupportedArchitectureError, UnsupportedConfigError
from iterserve.model.family_models import model_class
from iterserve.model.loader import load_config, load_model

pytestmark = pytest.mark.slow

#: bfloat16: the median over rows of the largest logit error, relative to the
#: logits' scale (isolated rows may differ more where bf16 rounding flips an
#: expert choice, as it does between transformers' own bf16 and fp32 runs) ...
BF16_MEDIAN_ERROR = 0.04
#: ... and the greedy choice agrees wherever the reference's top two logits
#: are at least this far apart (closer ones are bf16 ties).
BF16_CLEAR_MARGIN = 0.25


class _Lazy(dict):
    """kind -> value, each made on first use (a test pays for its own family only)."""

    def __init__(self, make) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, kind: str):
        self[kind] = value = self._make(kind)
        return value


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory, tiny_dir: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return _Lazy(lambda kind: build(kind, root / kind, tokenizer_dir=tiny_dir))


@pytest.fixture(scope="module")
def references(checkpoints: dict[str, Path]) -> dict[str, object]:
    return _Lazy(lambda kind: reference(checkpoints[kind]))


def _check_family_reading(kind: str, model) -> None:
    """What the loader read off the family's config (the test configs' values)."""
    config, variant = model.config, model.config.variant
    if kind == "gemma":  # Gemma 1: the Llama layer with Gemma's norms, embedding and GeGLU
        assert not variant.sandwich_norms and variant.activation == "gelu_tanh"
        assert variant.embedding_multiplier == 8.0 and variant.attention_scale is None
    elif kind == "gemma2":
        assert (variant.attn_logit_softcap, variant.final_logit_softcap) == (2.0, 3.0)
        assert variant.attention_scale == pytest.approx(24 ** -0.5)
        assert config.sliding_windows == (4, None, 4)  # transformers' alternation
        assert model.weights.lm_head is model.weights.embed_tokens  # Gemma ties by default
    elif kind in ("gemma3", "gemma3_multimodal"):
        assert variant.local_rope_layers == (True, False, True)
        assert config.sliding_windows == (4, None, 4)
        assert config.rope_type == "linear" and variant.local_rope_inv_freq
        assert variant.attn_logit_softcap is None  # stated, but transformers never applies it
        assert variant.final_logit_softcap == (3.0 if kind == "gemma3" else None)
    elif kind in ("phi3", "phi4_mini"):
        assert config.rope_type == "longrope"
        assert config.rotary_dim == (12 if kind == "phi4_mini" else 16)
        assert (model.weights.lm_head is model.weights.embed_tokens) == (kind == "phi4_mini")
        assert config.max_position_embeddings == 64  # original_max_position_embeddings
        if model._buckets_rows and hasattr(model.native_ops, "decoder_layers"):
            assert model._native_layers is not None  # so it takes the native layer loop
    else:
        moe = variant.moe
        assert moe is not None
        dense = [layer.experts is None for layer in model.weights.layers]
        assert dense == {"qwen3_moe": [False, True, False], "qwen2_moe": [False, False, True],
                         "mixtral": [False] * 3}[kind]
        shared = model.weights.layers[0].experts.shared_gate  # type: ignore[union-attr]
        assert (shared is not None) == (kind == "qwen2_moe")
        assert (model.weights.layers[0].qkv_bias is not None) == (kind == "qwen2_moe")


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("kind", FAMILIES)
def test_float32_logits_match_the_reference(kind: str, backend: str, checkpoints, references,
                                            test_device: str) -> None:
    """"auto": the native attention kernel where it is built (CPU); "torch": SDPA
    (and the eager soft-capped form), the path a CUDA model takes."""
    model = load_model(checkpoints[kind], device=test_device, attention_backend=backend)
    _check_family_reading(kind, model)
    for seed in range(3):
        assert_random_mix_matches(model, references[kind], seed=seed, block_size=4)


def _prefill_then_decode(model, tokens: list[int], prompt_len: int) -> torch.Tensor:
    """Logits of rows prompt_len - 1 .. len - 1: one prefill chunk, then decode steps."""
    cache = model.allocate_cache(num_blocks=32, block_size=4)
    handout = BlockHandout(32, 4)
    rows = [run_segments(model, cache, handout, [("a", tokens[:prompt_len], 0, True)])[0]]
    for start in range(prompt_len, len(tokens)):
        rows.append(run_segments(model, cache, handout, [("a", tokens[start:start + 1], start,
                                                          True)])[0])
    return torch.stack(rows).float()


@pytest.mark.parametrize("kind", FAMILIES)
def test_bfloat16_logits_are_close_and_choose_the_same_tokens(kind: str, checkpoints) -> None:
    model = load_model(checkpoints[kind], dtype=torch.bfloat16)
    _check_family_reading(kind, model)
    rng = random.Random(1)
    tokens = [rng.randrange(model.config.vocab_size) for _ in range(24)]
    ours = _prefill_then_decode(model, tokens, prompt_len=12)
    expected = reference_logits(reference(checkpoints[kind], torch.bfloat16), tokens)[11:]
    scale = expected.abs().max().item()
    assert (ours - expected).abs().amax(dim=-1).median().item() <= BF16_MEDIAN_ERROR * scale
    top2 = expected.topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) >= BF16_CLEAR_MARGIN
    assert clear.sum() >= len(clear) // 2  # the check below is not vacuous
    assert torch.equal(ours.argmax(-1)[clear], expected.argmax(-1)[clear])


def test_soft_capped_attention_refuses_the_native_kernel(checkpoints) -> None:
    with pytest.raises(ValueError, match="cannot soft-cap attention"):
        load_model(checkpoints["gemma2"], attention_backend="cpp")


#: Per family, the variant fields that set it apart, each turned off in turn (or,
#: for a cap transformers states but does not apply, turned on).
MUTATIONS: dict[str, list[dict[str, object]]] = {
    "gemma2": [{"attn_logit_softcap": None}, {"final_logit_softcap": None},
               {"embedding_multiplier": 1.0}, {"attention_scale": None},
               {"activation": "silu"}],
    "gemma": [{"embedding_multiplier": 1.0}, {"activation": "silu"}],
    "gemma3": [{"local_rope_layers": ()}, {"attention_scale": None},
               {"final_logit_softcap": None}, {"attn_logit_softcap": 2.0}],
    "gemma3_multimodal": [{"final_logit_softcap": 3.0}],
    "qwen3_moe": [{"moe": "normalize_top_k"}],
    "qwen2_moe": [{"moe": "normalize_top_k"}],
}


@pytest.mark.parametrize(("kind", "change"), [
    (kind, change) for kind, changes in MUTATIONS.items() for change in changes])
def test_each_family_feature_is_needed_to_match(kind: str, change: dict, checkpoints,
                                                references) -> None:
    model = load_model(checkpoints[kind])
    variant = model.config.variant
    if change == {"moe": "normalize_top_k"}:
        assert variant.moe is not None
        change = {"moe": dataclasses.replace(variant.moe,
                                             normalize_top_k=not variant.moe.normalize_top_k)}
    config = dataclasses.replace(model.config, variant=dataclasses.replace(variant, **change))
    mutated = model_class(config)(config, model.weights)
    tokens = list(range(3, 15))
    ours = _prefill_then_decode(mutated, tokens, prompt_len=len(tokens))
    expected = reference_logits(references[kind], tokens)[-1]
    assert (ours[0] - expected).abs().max().item() > 1e-2


def test_phi3_longrope_short_factors_are_needed_to_match(checkpoints, references) -> None:
    model = load_model(checkpoints["phi3"])
    config = dataclasses.replace(model.config, rope_inv_freq=())  # plain RoPE from rope_theta
    mutated = model_class(config)(config, model.weights)
    tokens = list(range(3, 15))
    ours = _prefill_then_decode(mutated, tokens, prompt_len=len(tokens))
    assert (ours[0] - reference_logits(references["phi3"], tokens)[-1]).abs().max() > 1e-2


@pytest.mark.parametrize("kind", FAMILIES)
def test_greedy_tokens_through_the_engine_match_transformers(kind: str, checkpoints,
                                                             references) -> None:
    from iterserve import LLM, SamplingParams

    prompts = [[5, 17, 42, 9, 100, 7], [250, 3], [11, 12, 13, 14, 15, 16, 17, 18, 19]]
    llm = LLM(checkpoints[kind], dtype="float32", num_kv_blocks=32, block_size=4,
              max_model_len=48)
    try:
        outputs = llm.generate(prompts, SamplingParams(max_tokens=8, temperature=0.0,
                                                       ignore_eos=True))
    finally:
        llm.close()
    for prompt, output in zip(prompts, outputs, strict=True):
        with torch.inference_mode():
            expected = references[kind].generate(
                torch.tensor([prompt]), max_new_tokens=8, do_sample=False,
                min_new_tokens=8, pad_token_id=0)[0, len(prompt):]
        assert list(output.token_ids) == expected.tolist()


@pytest.mark.parametrize(("architecture", "model_type"), [
    ("GPT2LMHeadModel", "gpt2"),
    ("GPTNeoXForCausalLM", "gpt_neox"),
    ("PhiForCausalLM", "phi"),
    ("LlavaForConditionalGeneration", "llava"),
])
def test_other_architectures_are_refused_naming_themselves(architecture: str, model_type: str,
                                                           tmp_path: Path) -> None:
    # GPT-2's config has n_layer, not num_hidden_layers: the family is named, not the key
    raw = {"architectures": [architecture], "model_type": model_type, "n_layer": 2}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(UnsupportedArchitectureError, match=f"unsupported architecture "
                                                           f"'{architecture}'"):
        load_config(tmp_path)


def test_a_multimodal_config_without_text_config_is_refused(tmp_path: Path) -> None:
    raw = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3"}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(UnsupportedConfigError, match="no text_config"):
        load_config(tmp_path)


def _set(name: str, shape: tuple[int, ...]):
    return lambda tensors: tensors.__setitem__(name, torch.zeros(shape))


def _drop(name: str):
    return lambda tensors: tensors.pop(name)


@pytest.mark.parametrize(("kind", "damage", "words"), [
    ("phi3", _set("model.layers.0.self_attn.qkv_proj.weight", (10, 64)), "qkv_proj.*(128, 64)"),
    ("phi3", _set("model.layers.1.mlp.gate_up_proj.weight", (128, 64)), "gate_up_proj.*(256, 64)"),
    ("gemma2", _drop("model.layers.1.pre_feedforward_layernorm.weight"),
     "no tensor 'model.layers.1.pre_feedforward_layernorm.weight'"),
    ("gemma2", _set("model.layers.1.post_feedforward_layernorm.weight", (3,)), r"\(64,\)"),
    ("gemma3", _set("model.layers.1.self_attn.q_norm.weight", (3,)), r"q_norm.*\(16,\)"),
    ("gemma3_multimodal", _set("language_model.model.layers.0.self_attn.q_proj.weight", (3, 64)),
     "language_model.model.layers.0.self_attn.q_proj.weight"),
    ("qwen3_moe", _set("model.layers.0.mlp.experts.1.up_proj.weight", (47, 64)), r"\(48, 64\)"),
    ("qwen3_moe", _drop("model.layers.2.mlp.experts.5.down_proj.weight"), "experts.5.down_proj"),
    ("qwen3_moe", _set("model.layers.0.mlp.gate.weight", (5, 64)), r"mlp.gate.weight.*\(6, 64\)"),
    ("mixtral", _drop("model.layers.0.block_sparse_moe.gate.weight"), "block_sparse_moe.gate"),
    ("qwen2_moe", _drop("model.layers.1.mlp.shared_expert_gate.weight"), "shared_expert_gate"),
    ("qwen2_moe", _set("model.layers.0.mlp.shared_expert.down_proj.weight", (64, 79)),
     r"shared_expert.down_proj.*\(64, 80\)"),
])
def test_a_damaged_family_tensor_is_one_checkpoint_error_naming_it(kind: str, damage, words: str,
                                                                   checkpoints,
                                                                   tmp_path: Path) -> None:
    import shutil

    from safetensors.torch import load_file, save_file

    from iterserve.model.errors import CheckpointError

    model_dir = tmp_path / kind
    shutil.copytree(checkpoints[kind], model_dir)
    tensors = load_file(model_dir / "model.safetensors")
    damage(tensors)
    save_file(tensors, model_dir / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=words):
        load_model(model_dir)
