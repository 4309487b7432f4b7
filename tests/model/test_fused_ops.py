"""The fused element-wise ops (model/csrc/fused_ops.cpp) against the torch
ops they replace in the decoder layer."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from iterserve.model import kernels

CPU = torch.device("cpu")
pytestmark = pytest.mark.usefixtures("paged_decode_kernel")

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# (rows, width): the AVX-512 path, a masked tail, a width under one vector, and rows
# enough to be split over threads (past kMinParallelElements = 2^17 elements)
SHAPES = [(7, 64), (33, 1024), (5, 100), (3, 9), (600, 1024)]


def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    if actual.dtype == torch.float32:
        torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    else:  # float32 sums in another order may round the last bit the other way
        torch.testing.assert_close(actual.float(), expected.float(), atol=1e-2, rtol=1e-2)
        assert (actual != expected).float().mean() < 0.02


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "width"), SHAPES)
def test_fused_add_rms_norm_equals_add_then_rms_norm(dtype: torch.dtype, rows: int,
                                                     width: int) -> None:
    generator = torch.Generator().manual_seed(rows * width)
    x, residual = (torch.randn(rows, width, generator=generator).to(dtype) for _ in range(2))
    weight = (1 + 0.1 * torch.randn(width, generator=generator)).to(dtype)
    expected_residual = residual + x
    expected = F.rms_norm(expected_residual, (width,), weight, 1e-5)
    with torch.inference_mode():
        kernels.load_paged_decode().fused_add_rms_norm(x, residual, weight, 1e-5)
    assert torch.equal(residual, expected_residual)  # one rounding of the same float sum
    _close(x, expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "width"), SHAPES)
def test_silu_and_mul_equals_silu_times_up(dtype: torch.dtype, rows: int, width: int) -> None:
    generator = torch.Generator().manual_seed(rows + width)
    gate_up = (4 * torch.randn(rows, 2 * width, generator=generator)).to(dtype)
    gate_up[0, :2] = torch.tensor([-120.0, 95.0])  # e^-g past float32's range both ways
    gate, up = gate_up.chunk(2, dim=-1)
    with torch.inference_mode():
        out = kernels.load_paged_decode().silu_and_mul(gate_up)
    assert out.shape == (rows, width) and out.dtype == dtype
    _close(out, F.silu(gate) * up)


def test_shapes_and_dtypes_are_checked() -> None:
    ops = kernels.load_paged_decode()
    x = torch.zeros(2, 8)
    with torch.inference_mode():
        with pytest.raises(RuntimeError, match="differ in shape"):
            ops.fused_add_rms_norm(x, torch.zeros(3, 8), torch.ones(8), 1e-5)
        with pytest.raises(RuntimeError, match="share a dtype"):
            ops.fused_add_rms_norm(x, torch.zeros(2, 8), torch.ones(8, dtype=torch.bfloat16), 1e-5)
        with pytest.raises(RuntimeError, match="even number"):
            ops.silu_and_mul(torch.zeros(2, 7))
        with pytest.raises(RuntimeError, match="contiguous 2-D"):
            ops.silu_and_mul(torch.zeros(4, 8).t())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "head_dim"), [(37, 64), (37, 128), (37, 40), (37, 6),
                                                (900, 64)])  # the last split over threads
def test_rotary_in_place_equals_apply_rotary(dtype: torch.dtype, rows: int,
                                             head_dim: int) -> None:
    """On a head slice of a wider row, as the model passes q and k."""
    from iterserve.model.rope import apply_rotary, inverse_frequencies, rotary_tables

    generator = torch.Generator().manual_seed(head_dim)
    qkv = torch.randn(rows, 12, head_dim, generator=generator).to(dtype)
    untouched = qkv[:, 10:].clone()
    tables = rotary_tables(torch.arange(rows) * 11, inverse_frequencies(head_dim, 1e4, CPU),
                           dtype)
    expected = apply_rotary(qkv[:, :10], tables)
    with torch.inference_mode():
        kernels.load_paged_decode().rotary_in_place(qkv[:, :10], tables.cos, tables.signed_sin)
    _close(qkv[:, :10], expected)
    assert torch.equal(qkv[:, 10:], untouched)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "kv_heads", "head_dim"), [(1, 4, 64), (37, 2, 128), (5, 1, 6)])
def test_write_kv_stores_what_index_copy_stores(dtype: torch.dtype, rows: int, kv_heads: int,
                                                head_dim: int) -> None:
    """From strided rows (keys and values are slices of one fused QKV row), at
    shuffled slots, bit for bit what PagedKVCache.write's index_copy_ stores."""
    generator = torch.Generator().manual_seed(rows * head_dim)
    qkv = torch.randn(rows, 3 + 2 * kv_heads, head_dim, generator=generator).to(dtype)
    keys, values = qkv[:, 3:3 + kv_heads], qkv[:, 3 + kv_heads:]
    pools = [torch.zeros(16, 4, kv_heads, head_dim, dtype=dtype) for _ in range(4)]
    slots = torch.randperm(64, generator=generator)[:rows]
    with torch.inference_mode():
        kernels.load_paged_decode().write_kv(pools[0], pools[1], slots, keys, values)
    for pool, rows_in in ((pools[2], keys), (pools[3], values)):
        pool.view(-1, kv_heads, head_dim).index_copy_(0, slots, rows_in)
    assert torch.equal(pools[0], pools[2]) and torch.equal(pools[1], pools[3])
    assert pools[0].abs().sum() > 0


def test_write_kv_refuses_a_slot_outside_the_pool_and_a_misshapen_row() -> None:
    ops = kernels.load_paged_decode()
    pools = [torch.zeros(2, 4, 1, 8) for _ in range(2)]
    rows = torch.ones(1, 1, 8)
    with torch.inference_mode():
        with pytest.raises(RuntimeError, match="outside the pool"):
            ops.write_kv(pools[0], pools[1], torch.tensor([8]), rows, rows)
        with pytest.raises(RuntimeError, match="each row contiguous"):
            ops.write_kv(pools[0], pools[1], torch.tensor([0]), torch.ones(1, 8, 1), rows)
    assert all(pool.abs().sum() == 0 for pool in pools)
