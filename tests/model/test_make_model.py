"""make_model output is a real HF checkpoint; presets; tokenizers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iterserve.model.cache_dir import cache_root
from iterserve.model.make_model import make_model
from iterserve.model.presets import PRESETS, get_preset
from iterserve.model.tokenizer import FakeTokenizer, load_tokenizer

TEXTS = [
    "Hello, how are you today?",
    "The scheduler runs 64 requests; each one owns its blocks.",
    "  leading spaces, tabs\tand\nnewlines ",
    "Ünïcödé, 你好, emoji 🙂 and symbols #$%&*",
    "",
]


def _num_parameters(name: str, vocab_size: int) -> int:
    p = get_preset(name)
    head_dim = p.hidden_size // p.num_heads
    attention = 2 * p.hidden_size * head_dim * (p.num_heads + p.num_kv_heads)
    layer = attention + 3 * p.hidden_size * p.intermediate_size + 2 * p.hidden_size
    embeddings = vocab_size * p.hidden_size * (1 if p.tie_word_embeddings else 2)
    return p.num_layers * layer + embeddings + p.hidden_size


def test_files_written(tiny_dir: Path) -> None:
    for name in (
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ):
        assert (tiny_dir / name).is_file(), name
    config = json.loads((tiny_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert 2000 <= config["vocab_size"] <= 4000
    assert (config["num_key_value_heads"], config["intermediate_size"]) == (2, 688)


def test_unknown_preset_lists_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="small, tiny"):
        make_model(tmp_path, preset="huge")


def test_small_preset_is_about_100m_parameters() -> None:
    assert set(PRESETS) == {"tiny", "small"}
    assert 90e6 <= _num_parameters("small", 4096) <= 110e6


def test_same_seed_same_bytes_other_seed_differs(tiny_dir: Path, tmp_path: Path) -> None:
    again = make_model(tmp_path / "again", preset="tiny", seed=0)
    other = make_model(tmp_path / "other", preset="tiny", seed=1)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (again / name).read_bytes() == (tiny_dir / name).read_bytes(), name
    assert (other / "model.safetensors").read_bytes() != (
        tiny_dir / "model.safetensors"
    ).read_bytes()


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_round_trips(tiny_dir: Path, text: str) -> None:
    tokenizer = load_tokenizer(tiny_dir)
    ids = tokenizer.encode(text)
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.decode(ids) == text
    assert max(ids) < tokenizer.vocab_size
    assert len(tokenizer.encode("Hello, how are you today?")) < len("Hello, how are you today?")


def test_tokenizer_special_tokens_and_chat(tiny_dir: Path) -> None:
    tokenizer = load_tokenizer(tiny_dir)
    assert len(tokenizer.eos_token_ids) == 2
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "hi there"}])
    text = tokenizer.decode(ids, skip_special_tokens=False)
    assert text == "<|begin_of_text|><|start|>user\nhi there<|end|>\n<|start|>assistant\n"


@pytest.mark.slow
def test_transformers_loads_it_offline(tiny_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.num_key_value_heads == 2
    ids = tokenizer("Hello world")["input_ids"]
    assert ids == load_tokenizer(tiny_dir).encode("Hello world")
    assert tokenizer.decode(ids, skip_special_tokens=True) == "Hello world"
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), model.config.vocab_size)


@pytest.mark.parametrize("text", TEXTS)
def test_fake_tokenizer_round_trips(text: str) -> None:
    fake = FakeTokenizer()
    ids = fake.encode(text)
    assert ids[0] == fake.BOS_ID
    assert fake.decode(ids) == text
    assert fake.decode([*ids, fake.EOS_ID], skip_special_tokens=False).endswith("<eos>")


def test_cache_root_follows_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_root() == tmp_path / "iterserve"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "iterserve"
