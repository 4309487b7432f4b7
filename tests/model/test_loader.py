"""Loader: safetensors only, clear errors, sharded index, tied embeddings, dtypes."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from model_helpers import ATOL, BlockHandout, random_tokens, reference_logits, run_segments
from safetensors.torch import load_file, save_file

from iterserve.model.config import SUPPORTED_ARCHITECTURES
from iterserve.model.errors import (
    CheckpointError,
    MissingCheckpointFileError,
    UnsupportedArchitectureError,
    UnsupportedConfigError,
)
from iterserve.model.loader import load_config, load_model


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit_config(model_dir: Path, **changes: object) -> None:
    path = model_dir / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def _prompt_logits(model, prompt: list[int]) -> torch.Tensor:
    cache = model.allocate_cache(num_blocks=8, block_size=4)
    return run_segments(model, cache, BlockHandout(8, 4), [("r", prompt, 0, True)])[0]


def test_unsupported_architecture_names_it_and_lists_supported(tiny_dir, tmp_path) -> None:
    model_dir = _copy(tiny_dir, tmp_path / "m")
    _edit_config(model_dir, architectures=["GPT2LMHeadModel"], model_type="gpt2")
    with pytest.raises(UnsupportedArchitectureError) as error:
        load_model(model_dir)
    assert "GPT2LMHeadModel" in str(error.value)
    for name in SUPPORTED_ARCHITECTURES:
        assert name in str(error.value)


def test_missing_config_names_the_file(tmp_path) -> None:
    with pytest.raises(MissingCheckpointFileError, match="config.json"):
        load_model(tmp_path)


def test_missing_weights_names_the_file(tiny_dir, tmp_path) -> None:
    model_dir = _copy(tiny_dir, tmp_path / "m")
    (model_dir / "model.safetensors").unlink()
    with pytest.raises(MissingCheckpointFileError, match="model.safetensors"):
        load_model(model_dir)


def test_pickle_only_checkpoint_is_refused(tiny_dir, tmp_path) -> None:
    model_dir = _copy(tiny_dir, tmp_path / "m")
    (model_dir / "model.safetensors").unlink()
    (model_dir / "pytorch_model.bin").write_bytes(b"not unpickled")
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin.*safetensors only"):
        load_model(model_dir)


def test_unimplemented_rope_scaling_is_rejected(tiny_dir, tmp_path) -> None:
    """linear/dynamic/yarn/llama3 (test_architectures) and longrope (test_families)
    load; any other rope type is named."""
    model_dir = _copy(tiny_dir, tmp_path / "m")
    _edit_config(model_dir, rope_scaling={"rope_type": "mrope", "factor": 2.0})
    with pytest.raises(UnsupportedConfigError, match="mrope.*supported: default, linear"):
        load_config(model_dir)


def test_incomplete_rope_parameters_name_the_rope_type(tiny_dir, tmp_path) -> None:
    model_dir = _copy(tiny_dir, tmp_path / "m")
    _edit_config(model_dir, rope_scaling={"rope_type": "llama3", "factor": 8.0})
    with pytest.raises(CheckpointError, match="'llama3'"):
        load_config(model_dir)


def test_linear_rope_scaling_divides_the_frequencies(tiny_dir, tmp_path) -> None:
    model_dir = _copy(tiny_dir, tmp_path / "m")
    _edit_config(model_dir, rope_scaling={"rope_type": "linear", "factor": 2.0})
    scaled, plain = load_config(model_dir), load_config(tiny_dir)
    assert scaled.rope_type == "linear" and plain.rope_inv_freq == ()
    assert scaled.rope_inv_freq[1] == pytest.approx(10000.0 ** (-2 / 32) / 2.0)


def test_config_fields(tiny_dir) -> None:
    config = load_config(tiny_dir)
    assert (config.num_layers, config.hidden_size, config.num_heads) == (4, 256, 8)
    assert (config.num_kv_heads, config.head_dim, config.num_queries_per_kv) == (2, 32, 4)
    assert config.sliding_windows == (None,) * 4
    assert config.rope_theta == 10000.0


@pytest.mark.slow
def test_sharded_checkpoint_loads_like_single_file(tiny_dir, tiny_model, tmp_path) -> None:
    model_dir = _copy(tiny_dir, tmp_path / "m")
    tensors = load_file(model_dir / "model.safetensors")
    (model_dir / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[::2],
        "model-00002-of-00002.safetensors": names[1::2],
    }
    weight_map = {}
    for shard, shard_names in shards.items():
        save_file({n: tensors[n] for n in shard_names}, str(model_dir / shard))
        weight_map.update(dict.fromkeys(shard_names, shard))
    index = {"metadata": {}, "weight_map": weight_map}
    (model_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    prompt = random_tokens(random.Random(3), 6, tiny_model.config.vocab_size)
    torch.testing.assert_close(
        _prompt_logits(load_model(model_dir), prompt), _prompt_logits(tiny_model, prompt)
    )
    (model_dir / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(MissingCheckpointFileError, match="model-00002-of-00002"):
        load_model(model_dir)


@pytest.mark.slow
def test_tied_embeddings_match_reference(tiny_dir, tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    model_dir = _copy(tiny_dir, tmp_path / "m")
    tensors = load_file(model_dir / "model.safetensors")
    del tensors["lm_head.weight"]
    save_file(tensors, str(model_dir / "model.safetensors"))
    _edit_config(model_dir, tie_word_embeddings=True)
    model = load_model(model_dir)
    assert model.weights.lm_head is model.weights.embed_tokens
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompt = random_tokens(random.Random(4), 6, model.config.vocab_size)
    expected = reference_logits(reference, prompt)[-1]
    torch.testing.assert_close(_prompt_logits(model, prompt), expected, atol=ATOL, rtol=0)


@pytest.mark.slow
def test_bfloat16_load_runs_close_to_float32(tiny_dir, tiny_model) -> None:
    model = load_model(tiny_dir, dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16
    assert model.allocate_cache(4, 4).key_pools[0].dtype == torch.bfloat16
    prompt = random_tokens(random.Random(5), 6, model.config.vocab_size)
    low, high = _prompt_logits(model, prompt), _prompt_logits(tiny_model, prompt)
    assert low.dtype == torch.float32
    torch.testing.assert_close(low, high, atol=0.1, rtol=0)


def test_unsupported_dtype_is_refused(tiny_dir) -> None:
    with pytest.raises(ValueError, match="float64"):
        load_model(tiny_dir, dtype=torch.float64)
    with pytest.raises(ValueError, match="'int8'.*auto"):
        load_model(tiny_dir, dtype="int8")


@pytest.mark.slow
def test_float16_load_runs_close_to_float32(tiny_dir, tiny_model) -> None:
    model = load_model(tiny_dir, dtype="float16")
    assert model.dtype == torch.float16
    prompt = random_tokens(random.Random(6), 6, model.config.vocab_size)
    torch.testing.assert_close(_prompt_logits(model, prompt), _prompt_logits(tiny_model, prompt),
                               atol=0.05, rtol=0)


@pytest.mark.parametrize(("declared", "expected"), [
    ({"torch_dtype": "bfloat16"}, torch.bfloat16),
    ({"dtype": "float16", "torch_dtype": None}, torch.float16),
    ({"torch_dtype": None}, torch.float32),
])
def test_auto_dtype_is_the_checkpoints(tiny_dir, tmp_path, declared, expected) -> None:
    model_dir = _copy(tiny_dir, tmp_path / "m")
    _edit_config(model_dir, **declared)
    assert load_model(model_dir, dtype="auto").dtype == expected
