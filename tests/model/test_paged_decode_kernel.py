"""The in-place decode kernel (model/csrc/paged_decode.cpp) against the gather +
SDPA path it replaces, and the fallback when it cannot be built."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest
import torch
from model_helpers import ATOL

from iterserve.model import kernels
from iterserve.model.attention import AttentionMetadata, Window, paged_attention
from iterserve.model.llama import PackedCausalLM
from iterserve.model.packing import SegmentSpec, pack

CPU = torch.device("cpu")


def _attend_both(seed: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 block_size: int, window: Window, dtype: torch.dtype,
                 chunk_rows: int = 0, chunks: tuple[tuple[int, int], ...] = (),
                 chunks_in_place: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Random context lengths 0..599 (1..600 keys) over a shuffled block pool,
    optionally with multi-row chunks among the decode rows: `chunk_rows` rows
    from position 0, and each (start, rows) of `chunks`; (kernel, torch) outputs."""
    rng = random.Random(seed)
    starts = [0, 599, block_size - 1, block_size] + [rng.randint(0, 599) for _ in range(8)]
    chunks = ((0, chunk_rows),) + chunks if chunk_rows else chunks
    needs = [-(-(start + 1) // block_size) for start in starts]
    chunk_needs = [-(-(start + rows) // block_size) for start, rows in chunks]
    free = list(range(sum(needs) + sum(chunk_needs) + 5))
    rng.shuffle(free)
    specs = [SegmentSpec([1], start, [free.pop() for _ in range(need)], True)
             for start, need in zip(starts, needs, strict=True)]
    for index, ((start, rows), need) in enumerate(zip(chunks, chunk_needs, strict=True)):
        specs.insert(5 + 3 * index,
                     SegmentSpec([1] * rows, start, [free.pop() for _ in range(need)], True))
    batch = pack(specs, block_size)
    generator = torch.Generator().manual_seed(seed)
    pool_shape = (len(free) + sum(needs) + sum(chunk_needs), block_size, num_kv_heads, head_dim)
    key_pool, value_pool = (torch.randn(pool_shape, generator=generator).to(dtype)
                            for _ in range(2))
    # the query as the model passes it: a head slice of a wider row (not contiguous)
    qkv = torch.randn(batch.num_rows, num_heads + 2, head_dim, generator=generator).to(dtype)
    query = qkv[:, :num_heads]
    flat = (-1, num_kv_heads, head_dim)
    new_keys = key_pool.view(flat).index_select(0, batch.slot_mapping)
    new_values = value_pool.view(flat).index_select(0, batch.slot_mapping)
    outputs = []
    for in_place in (kernels.load_paged_decode(), None):
        metadata = AttentionMetadata.build(batch, [window], mask_dtype=dtype,
                                           in_place=in_place, chunks_in_place=chunks_in_place)
        outputs.append(paged_attention(query, new_keys, new_values, key_pool, value_pool,
                                       metadata, window))
    return outputs[0], outputs[1]


@pytest.mark.usefixtures("paged_decode_kernel")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("num_heads", "num_kv_heads", "head_dim"),
                         [(4, 4, 16), (8, 2, 64), (6, 1, 8), (16, 4, 32)])
@pytest.mark.parametrize("block_size", [1, 5, 16])
@pytest.mark.parametrize("window", [None, 7, 64])
def test_kernel_equals_gather_and_sdpa(dtype: torch.dtype, num_heads: int, num_kv_heads: int,
                                       head_dim: int, block_size: int, window: Window) -> None:
    seed = hash((num_heads, block_size, window)) % 1000
    kernel, reference = _attend_both(seed, num_heads, num_kv_heads, head_dim, block_size,
                                     window, dtype, chunk_rows=(block_size * 3) // 2 + 1)
    assert kernel.dtype == reference.dtype == dtype
    if dtype == torch.float32:
        torch.testing.assert_close(kernel, reference, atol=2e-6, rtol=1e-5)
    else:  # both round to bf16 at the end, from float32 softmaxes summed in other orders
        torch.testing.assert_close(kernel.float(), reference.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.usefixtures("paged_decode_kernel")
@pytest.mark.parametrize(("num_heads", "num_kv_heads", "head_dim"),
                         [(8, 2, 64), (6, 1, 24), (12, 4, 48), (4, 4, 128)])
@pytest.mark.parametrize("block_size", [1, 5, 16])
@pytest.mark.parametrize("window", [None, 7, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunks_after_position_zero_equal_gather_and_sdpa(
        dtype: torch.dtype, num_heads: int, num_kv_heads: int, head_dim: int, block_size: int,
        window: Window) -> None:
    """Continuation chunks (prefill past position 0) of 2..40 rows, tiles cut
    mid-chunk, windows narrower and wider than a chunk, among decode rows."""
    seed = hash((num_heads, head_dim, block_size, window)) % 1000
    chunks = ((3, 2), (37, 17), (300, 40), (block_size, 33))
    kernel, reference = _attend_both(seed, num_heads, num_kv_heads, head_dim, block_size,
                                     window, dtype, chunks=chunks)
    if dtype == torch.float32:
        torch.testing.assert_close(kernel, reference, atol=2e-6, rtol=1e-5)
    else:
        torch.testing.assert_close(kernel.float(), reference.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.usefixtures("paged_decode_kernel")
def test_chunk_only_batch() -> None:
    """A lone prefill chunk (no decode rows) over a cached prefix."""
    block_size, generator = 16, torch.Generator().manual_seed(1)
    batch = pack([SegmentSpec([1] * 50, 70, [3, 0, 7, 1, 5, 2, 6, 4], True)], block_size)
    key_pool, value_pool = (torch.randn(8, block_size, 2, 64, generator=generator)
                            for _ in range(2))
    query = torch.randn(50, 8, 64, generator=generator)
    flat = (-1, 2, 64)
    new_keys = key_pool.view(flat).index_select(0, batch.slot_mapping)
    new_values = value_pool.view(flat).index_select(0, batch.slot_mapping)
    kernel, reference = (
        paged_attention(query, new_keys, new_values, key_pool, value_pool,
                        AttentionMetadata.build(batch, [None], in_place=in_place,
                                                chunks_in_place=True), None)
        for in_place in (kernels.load_paged_decode(), None))
    torch.testing.assert_close(kernel, reference, atol=2e-6, rtol=1e-5)


@pytest.mark.usefixtures("paged_decode_kernel")
@pytest.mark.parametrize("window", [None, 7])
def test_decode_rows_in_place_beside_sdpa_chunks(window: Window) -> None:
    """The model's routing: kernel for single rows, scattered among SDPA chunks."""
    kernel, reference = _attend_both(4, 8, 2, 64, 16, window, torch.float32,
                                     chunks=((0, 20), (45, 9)), chunks_in_place=False)
    torch.testing.assert_close(kernel, reference, atol=2e-6, rtol=1e-5)


@pytest.mark.usefixtures("paged_decode_kernel")
def test_decode_only_batch_needs_no_scatter() -> None:
    kernel, reference = _attend_both(3, 8, 2, 64, 16, None, torch.float32)
    torch.testing.assert_close(kernel, reference, atol=2e-6, rtol=1e-5)


@pytest.mark.usefixtures("paged_decode_kernel")
@pytest.mark.parametrize("head_dim", [64, 24])  # the AVX-512 path and the plain loop
def test_float16_matches_too(head_dim: int) -> None:
    kernel, reference = _attend_both(5, 8, 2, head_dim, 16, 64, torch.float16, chunk_rows=9)
    torch.testing.assert_close(kernel.float(), reference.float(), atol=2e-3, rtol=2e-3)


@pytest.mark.usefixtures("paged_decode_kernel")
def test_model_uses_the_kernel_and_matches_the_torch_path(tiny_model: PackedCausalLM) -> None:
    if tiny_model.device.type != "cpu":
        pytest.skip("the kernel is CPU-only")
    assert tiny_model.in_place_decode
    torch_model = PackedCausalLM(tiny_model.config, tiny_model.weights, attention_backend="torch")
    assert not torch_model.in_place_decode
    cache = tiny_model.allocate_cache(num_blocks=64, block_size=4)
    prompt = SegmentSpec([5, 9, 2, 7, 1, 3], 0, [10, 11], True)
    tiny_model.forward(pack([prompt], 4), cache)
    step = pack([SegmentSpec([4], 6, [10, 11], True), SegmentSpec([8], 0, [20], True)], 4)
    torch.testing.assert_close(tiny_model.forward(step, cache), torch_model.forward(step, cache),
                               atol=ATOL, rtol=0)


@pytest.mark.usefixtures("paged_decode_kernel")
def test_model_continuation_chunk_matches_the_torch_path(tiny_model: PackedCausalLM) -> None:
    """A prompt prefilled in two chunks, the second mixed with a decode row."""
    if tiny_model.device.type != "cpu":
        pytest.skip("the kernel is CPU-only")
    torch_model = PackedCausalLM(tiny_model.config, tiny_model.weights, attention_backend="torch")
    cache = tiny_model.allocate_cache(num_blocks=64, block_size=4)
    tiny_model.forward(pack([SegmentSpec([5, 9, 2, 7, 1], 0, [10, 11, 12, 13], False),
                             SegmentSpec([3, 3, 8], 0, [20], True)], 4), cache)
    step = pack([SegmentSpec([4, 6, 8, 2, 2, 9, 1], 5, [10, 11, 12, 13], True),
                 SegmentSpec([8], 3, [20], True)], 4)
    torch.testing.assert_close(tiny_model.forward(step, cache), torch_model.forward(step, cache),
                               atol=ATOL, rtol=0)


@pytest.mark.usefixtures("paged_decode_kernel")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_model_matches_the_torch_path(tiny_dir: Path, dtype: torch.dtype) -> None:
    """The production dtypes: native kernels (attention, fused add + RMSNorm,
    SiLU-and-mul, RoPE) against the torch path over prefill, a continuation
    chunk and decode; logits within a few half-precision ulps, the same argmax
    wherever the top two logits are not within rounding of each other."""
    from iterserve.model.loader import load_model

    native, plain = (load_model(tiny_dir, dtype=dtype, attention_backend=backend)
                     for backend in ("cpp", "torch"))
    caches = [model.allocate_cache(num_blocks=32, block_size=4) for model in (native, plain)]
    steps = [
        [SegmentSpec([5, 9, 2, 7, 1, 3, 3], 0, [1, 2], False), SegmentSpec([8, 8], 0, [9], True)],
        [SegmentSpec([4, 6, 8, 2], 7, [1, 2, 3], True), SegmentSpec([1], 2, [9], True)],
        [SegmentSpec([2], 11, [1, 2, 3], True), SegmentSpec([7], 3, [9, 10], True)],
    ]
    for specs in steps:
        batch = pack(specs, 4)
        got, expected = (model.forward(batch, cache)
                         for model, cache in zip((native, plain), caches, strict=True))
        torch.testing.assert_close(got, expected, atol=0.05, rtol=0.05)
        top_two = expected.topk(2, dim=-1).values
        clear = top_two[:, 0] - top_two[:, 1] > 0.01  # a random model's near-ties may flip
        assert torch.equal(got.argmax(-1)[clear], expected.argmax(-1)[clear])


def test_failed_build_falls_back_with_one_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    build_dir = tmp_path / "kernels"
    build_dir.mkdir()
    (build_dir / f"{kernels.LIBRARY_NAME}.so").write_bytes(b"not a shared library")
    monkeypatch.setattr(kernels, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(kernels, "build_key", lambda: "kernels")
    with caplog.at_level(logging.WARNING, logger=kernels.__name__):
        assert not kernels.resolve_in_place_decode("auto", torch.float32, CPU)
        assert not kernels.resolve_in_place_decode("auto", torch.bfloat16, CPU)
    assert [r.message.count("kernel unavailable") for r in caplog.records] == [1]
    with pytest.raises(kernels.KernelBuildError, match="kernel unavailable"):
        kernels.resolve_in_place_decode("cpp", torch.float32, CPU)


def test_missing_compiler_is_a_build_failure(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.raises(kernels.KernelBuildError, match="kernel unavailable"):
        kernels.load_paged_decode(tmp_path / "build")


def test_a_build_on_first_use_is_announced_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))  # fails fast, after the notice
    with (caplog.at_level(logging.WARNING, logger=kernels.__name__),
          pytest.raises(kernels.KernelBuildError)):
        kernels.load_paged_decode(tmp_path / "first-use")
    notices = [r.getMessage() for r in caplog.records if "building them into" in r.getMessage()]
    assert len(notices) == 1 and "\n" not in notices[0]
    assert str(tmp_path / "first-use") in notices[0] and "iterserve build-kernels" in notices[0]


def test_a_prebuilt_library_loads_without_a_notice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    build_dir = tmp_path / "prebuilt"
    build_dir.mkdir()
    (build_dir / f"{kernels.LIBRARY_NAME}.so").write_bytes(b"not a shared library")
    with (caplog.at_level(logging.WARNING, logger=kernels.__name__),
          pytest.raises(kernels.KernelBuildError)):
        kernels.load_paged_decode(build_dir)
    assert not any("building them into" in r.getMessage() for r in caplog.records)


def test_backend_names_and_devices_are_checked() -> None:
    assert not kernels.resolve_in_place_decode("torch", torch.float32, CPU)
    assert not kernels.resolve_in_place_decode("auto", torch.float64, CPU)
    with pytest.raises(ValueError, match="unknown; use one of"):
        kernels.resolve_in_place_decode("flash", torch.float32, CPU)
    with pytest.raises(ValueError, match="runs on CPU"):
        kernels.resolve_in_place_decode("cpp", torch.float32, torch.device("meta"))


@pytest.mark.usefixtures("paged_decode_kernel")
def test_build_kernels_command_reports_the_cached_build(capsys: pytest.CaptureFixture) -> None:
    from iterserve.cli.main import main

    assert main(["build-kernels"]) == 0
    assert f"paged_decode kernel ready in {kernels.cache_root()}" in capsys.readouterr().out


def test_build_kernels_command_names_a_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture) -> None:
    from iterserve.cli.main import main

    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / f"{kernels.LIBRARY_NAME}.so").write_bytes(b"")
    monkeypatch.setattr(kernels, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(kernels, "build_key", lambda: "bad")
    assert main(["build-kernels"]) == 1
    assert "fall back to the torch attention path" in capsys.readouterr().out
