"""A checkpoint whose config disagrees with its weights, a non-finite
constant, a token id outside the vocabulary, a --max-model-len past the
model's positions and budgets that cannot step: each one line and exit 2,
before any text is generated (model/checkpoint_check.py)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from iterserve.cli.main import main


def _mutated(tiny_dir: Path, tmp_path: Path, **changes: object) -> Path:
    copy = tmp_path / "model"
    shutil.copytree(tiny_dir, copy)
    config = json.loads((copy / "config.json").read_text())
    config.update(changes)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def _generate(model_dir: Path, *flags: str) -> list[str]:
    return ["generate", str(model_dir), "--prompt", "hello", "--max-tokens", "2",
            "--num-kv-blocks", "16", *flags]


def _config(tiny_dir: Path) -> dict:
    return json.loads((tiny_dir / "config.json").read_text())


CASES = {
    "fewer-layers": (lambda c: {"num_hidden_layers": c["num_hidden_layers"] - 1},
                     "num_hidden_layers is"),
    "nan-rope-theta": (lambda c: {"rope_theta": math.nan}, "rope_theta must be a finite"),
    "negative-rope-theta": (lambda c: {"rope_theta": -10000.0}, "rope_theta must be a finite"),
    "negative-rms-eps": (lambda c: {"rms_norm_eps": -1e-6}, "rms_norm_eps must be a finite"),
    "eos-outside-vocab": (lambda c: {"eos_token_id": c["vocab_size"]},
                          "eos_token_id"),
    "bos-outside-vocab": (lambda c: {"bos_token_id": -1}, "bos_token_id -1 is outside"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_config_at_odds_with_itself_or_its_weights_is_refused(case, tiny_dir, tmp_path,
                                                                capsys) -> None:
    change, needle = CASES[case]
    model = _mutated(tiny_dir, tmp_path, **change(_config(tiny_dir)))
    assert main(_generate(model)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no text generated
    assert captured.err.count("\n") == 1 and needle in captured.err, captured.err
    assert "outside the vocabulary" in captured.err or case not in (
        "eos-outside-vocab", "bos-outside-vocab")


def test_max_model_len_past_the_positions_is_refused_unless_rope_scaling_allows(
        tiny_dir, tmp_path, capsys) -> None:
    from iterserve.model.checkpoint_check import ConfigMismatch
    from iterserve.model.loader import check_model_len

    positions = _config(tiny_dir)["max_position_embeddings"]
    with pytest.raises(ConfigMismatch, match=f"exceeds the model's {positions} positions"):
        check_model_len(tiny_dir, positions + 1)
    check_model_len(tiny_dir, positions)
    scaled = _mutated(tiny_dir, tmp_path, rope_scaling={"rope_type": "linear", "factor": 2.0})
    check_model_len(scaled, 2 * positions)
    with pytest.raises(ConfigMismatch, match="linear RoPE scaling"):
        check_model_len(scaled, 2 * positions + 1)
    argv = ["serve", str(tiny_dir), "--max-model-len", str(positions + 1), "--num-kv-blocks", "4"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--max-model-len {positions + 1} exceeds" in err


def test_serve_refuses_a_token_budget_below_the_sequence_cap(capsys, tmp_path) -> None:
    assert main(["serve", str(tmp_path), "--max-num-batched-tokens", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--max-num-batched-tokens 1 is below --max-num-seqs 64" in err


def test_a_tensor_the_declared_architecture_never_reads_is_refused(tiny_dir, tmp_path,
                                                                   capsys) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    model = _mutated(tiny_dir, tmp_path)
    tensors = load_file(model / "model.safetensors")
    head_dim = _config(tiny_dir)["hidden_size"] // _config(tiny_dir)["num_attention_heads"]
    tensors["model.layers.0.self_attn.q_norm.weight"] = torch.ones(head_dim)
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(head_dim // 2)
    save_file(tensors, model / "model.safetensors")
    assert main(_generate(model)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1 tensor(s)" in err and "q_norm.weight" in err, err
