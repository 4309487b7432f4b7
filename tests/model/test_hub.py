"""Where models come from: a hub id from a local Hugging Face cache (never the
network), and a checkpoint whose only tokenizer is a sentencepiece model.

The fake caches here have huggingface_hub's layout: files under `blobs/`,
`snapshots/<commit>/` holding links to them, `refs/main` naming the commit.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from iterserve.cli.main import main
from iterserve.model.errors import MissingCheckpointFileError
from iterserve.model.hub import ModelNotFoundError, hub_cache_dir, resolve_model
from iterserve.model.tokenizer import load_tokenizer

COMMIT = "0123456789abcdef0123456789abcdef01234567"
GENERATE_ARGS = ["--max-tokens", "4", "--num-kv-blocks", "32", "--json"]


def _place_in_cache(model_dir: Path, cache: Path, repo_id: str) -> Path:
    """`model_dir`'s files as a cached hub snapshot of `repo_id`; returns the snapshot."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for index, file in enumerate(sorted(model_dir.iterdir())):
        blob = repo / "blobs" / f"blob{index}"
        shutil.copyfile(file, blob)
        (snapshot / file.name).symlink_to(Path("..") / ".." / "blobs" / blob.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


@pytest.fixture
def hf_home(tmp_path, monkeypatch) -> Path:
    """An empty HF_HOME for this test, with no other cache variable in the way."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    return home


def test_hub_id_resolves_to_its_cached_snapshot(tiny_dir, hf_home) -> None:
    snapshot = _place_in_cache(tiny_dir, hf_home / "hub", "acme/tiny-llama")
    source = resolve_model("acme/tiny-llama")
    assert source.path == snapshot and source.name == "acme/tiny-llama"


def test_hf_hub_cache_takes_precedence_over_hf_home(tiny_dir, hf_home, tmp_path,
                                                     monkeypatch) -> None:
    cache = tmp_path / "elsewhere"
    snapshot = _place_in_cache(tiny_dir, cache, "acme/tiny-llama")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    assert hub_cache_dir() == cache
    assert resolve_model("acme/tiny-llama").path == snapshot


def test_missing_hub_id_names_the_cache_path_searched(hf_home) -> None:
    with pytest.raises(ModelNotFoundError) as error:
        resolve_model("acme/not-downloaded")
    assert str(hf_home / "hub" / "models--acme--not-downloaded") in str(error.value)
    assert "downloads nothing" in str(error.value)


def test_cached_repo_without_its_snapshot_says_so(tiny_dir, hf_home) -> None:
    snapshot = _place_in_cache(tiny_dir, hf_home / "hub", "acme/tiny-llama")
    shutil.rmtree(snapshot)
    with pytest.raises(ModelNotFoundError, match="no snapshot that refs/main names"):
        resolve_model("acme/tiny-llama")


def test_a_path_that_is_not_a_hub_id_is_named(tmp_path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelNotFoundError, match=f"{missing}: no such directory"):
        resolve_model(missing)


@pytest.mark.slow
def test_generate_loads_a_model_by_its_hub_id(tiny_dir, hf_home, capsys) -> None:
    _place_in_cache(tiny_dir, hf_home / "hub", "acme/tiny-llama")
    assert main(["generate", "acme/tiny-llama", "--prompt", "Hello", *GENERATE_ARGS]) == 0
    by_id = json.loads(capsys.readouterr().out)
    assert main(["generate", str(tiny_dir), "--prompt", "Hello", *GENERATE_ARGS]) == 0
    by_dir = json.loads(capsys.readouterr().out)
    assert len(by_id["token_ids"]) == 4
    assert (by_id["token_ids"], by_id["text"]) == (by_dir["token_ids"], by_dir["text"])


@pytest.mark.slow
def test_llm_by_hub_id_is_named_by_it(tiny_dir, hf_home) -> None:
    from iterserve.llm import LLM

    _place_in_cache(tiny_dir, hf_home / "hub", "acme/tiny-llama")
    llm = LLM("acme/tiny-llama", num_kv_blocks=32)
    try:
        assert llm.runtime.model_name == "acme/tiny-llama"
        assert llm.generate(["Hello"])[0].token_ids
    finally:
        llm.close()


def test_generate_with_a_missing_hub_id_exits_2_naming_the_cache(hf_home, capsys) -> None:
    assert main(["generate", "acme/not-downloaded", "--prompt", "Hello"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(hf_home / "hub" / "models--acme--not-downloaded") in err


def _sentencepiece_model(vocab_size: int) -> bytes:
    """A tiny BPE sentencepiece model trained here the way Llama's was (ids 0-2:
    unk, <s>, </s>; bytes for unseen characters; whitespace kept as written)."""
    import sentencepiece

    text = ["The quick brown fox jumps over the lazy dog.",
            "Hello world, a tiny sentencepiece model for a test.",
            "Continuous batching schedules requests token by token."] * 40
    out = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(text), model_writer=out, vocab_size=vocab_size, model_type="bpe",
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, character_coverage=1.0, byte_fallback=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, split_digits=True,
        minloglevel=2)
    return out.getvalue()


@pytest.fixture(scope="module")
def sentencepiece_dir(tiny_dir, tmp_path_factory) -> Path:
    """The tiny checkpoint with its tokenizer.json replaced by a sentencepiece model."""
    model_dir = tmp_path_factory.mktemp("sentencepiece") / "m"
    shutil.copytree(tiny_dir, model_dir)
    (model_dir / "tokenizer.json").unlink()
    (model_dir / "tokenizer.model").write_bytes(_sentencepiece_model(400))
    (model_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "add_bos_token": True}))
    return model_dir


def test_sentencepiece_only_checkpoint_tokenizes_as_sentencepiece_does(sentencepiece_dir) -> None:
    import sentencepiece

    reference = sentencepiece.SentencePieceProcessor(
        model_file=str(sentencepiece_dir / "tokenizer.model"))
    tokenizer = load_tokenizer(sentencepiece_dir)
    assert tokenizer.bos_token_id == 1 and 2 in tokenizer.eos_token_ids
    for text in ("Hello world", "The lazy fox batches 128 tokens.", "quick  brown", "café ☕"):
        ids = tokenizer.encode(text)
        assert ids == [1, *reference.encode(text)]
        assert tokenizer.decode(ids) == reference.decode(reference.encode(text))


@pytest.mark.slow
def test_sentencepiece_only_checkpoint_generates(sentencepiece_dir, capsys) -> None:
    assert main(["generate", str(sentencepiece_dir), "--prompt", "Hello world",
                 *GENERATE_ARGS]) == 0
    assert len(json.loads(capsys.readouterr().out)["token_ids"]) == 4


def test_no_tokenizer_file_names_both_files_looked_for(tiny_dir, tmp_path) -> None:
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_dir, model_dir)
    (model_dir / "tokenizer.json").unlink()
    with pytest.raises(MissingCheckpointFileError) as error:
        load_tokenizer(model_dir)
    assert str(model_dir / "tokenizer.json") in str(error.value)
    assert "tokenizer.model" in str(error.value)


def test_serve_reads_a_hub_id_from_the_cache(tiny_dir, hf_home, capsys) -> None:
    """The config is read off the cached snapshot (a pool too small for one block of
    its layers is refused before any socket is bound); a missing id names the cache."""
    _place_in_cache(tiny_dir, hf_home / "hub", "acme/tiny-llama")
    assert main(["serve", "acme/tiny-llama", "--kv-cache-memory", "10"]) == 2
    assert "holds no block" in capsys.readouterr().err
    assert main(["serve", "acme/not-downloaded"]) == 2
    assert str(hf_home / "hub" / "models--acme--not-downloaded") in capsys.readouterr().err
