"""Bytes-per-row ABI (0x05): the coefficient admission consumes."""

from __future__ import annotations

import pytest

from iterserve.records.kv_abi import (
    KvRowAbi,
    UnsupportedKvLayoutError,
    active_bytes,
    block_bytes,
    bytes_per_row,
    committed_bytes,
    dtype_num_bytes,
    kv_row_abi_from_hf_config,
    num_blocks_for_bytes,
)

KIB = 1024

# A Llama-3-8B-shaped GQA config: 32 layers, 8 KV heads of 128 dims, bf16.
GQA_CONFIG = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
              "hidden_size": 4096, "torch_dtype": "bfloat16"}


def test_gqa_fp16_profile_is_128_kib_per_row() -> None:
    """0x05's m5-1-gqa-fp16-logical-row-v1 coefficient: 131,072 bytes = 128 KiB."""
    abi = kv_row_abi_from_hf_config(GQA_CONFIG, profile_id="m5-1-gqa-fp16-logical-row-v1")
    assert (abi.num_layers, abi.num_kv_heads, abi.head_dim, abi.dtype_bytes) == (32, 8, 128, 2)
    assert abi.bytes_per_row == 131_072 == 128 * KIB


def test_formula_counts_k_and_v_in_every_layer() -> None:
    assert bytes_per_row(num_layers=1, num_kv_heads=1, head_dim=1, dtype_bytes=1) == 2
    assert bytes_per_row(num_layers=24, num_kv_heads=2, head_dim=64, dtype_bytes=2) == 12_288


def test_defaults_head_dim_and_mha_kv_heads() -> None:
    config = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64,
              "torch_dtype": "torch.float32"}
    abi = kv_row_abi_from_hf_config(config, profile_id="tiny")
    assert (abi.num_kv_heads, abi.head_dim, abi.dtype_bytes) == (4, 16, 4)
    assert abi.bytes_per_row == 2 * 2 * 4 * 16 * 4


def test_explicit_head_dim_and_dtype_override_win() -> None:
    config = dict(GQA_CONFIG, head_dim=64, torch_dtype=None, dtype="float32")
    assert kv_row_abi_from_hf_config(config, profile_id="p").dtype_bytes == 4
    abi = kv_row_abi_from_hf_config(config, profile_id="p", dtype_name="float16")
    assert (abi.head_dim, abi.dtype_bytes) == (64, 2)


@pytest.mark.parametrize("config, message", [
    (dict(GQA_CONFIG, kv_lora_rank=512), "MLA"),
    ({k: v for k, v in GQA_CONFIG.items() if k != "num_hidden_layers"}, "num_hidden_layers"),
    (dict(GQA_CONFIG, num_key_value_heads=0), "positive"),
    (dict(GQA_CONFIG, torch_dtype="complex64"), "unknown dtype"),
    ({k: v for k, v in GQA_CONFIG.items() if k != "torch_dtype"}, "no dtype"),
])
def test_bad_configs_fail_loudly(config: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        kv_row_abi_from_hf_config(config, profile_id="p")


def test_mla_error_is_named() -> None:
    with pytest.raises(UnsupportedKvLayoutError):
        kv_row_abi_from_hf_config(dict(GQA_CONFIG, kv_lora_rank=512), profile_id="p")


def test_abi_rejects_non_positive_fields() -> None:
    with pytest.raises(ValueError, match="head_dim"):
        KvRowAbi("p", num_layers=1, num_kv_heads=1, head_dim=0, dtype_bytes=2)


def test_dtype_names() -> None:
    assert dtype_num_bytes("torch.bfloat16") == 2
    assert dtype_num_bytes("float8_e4m3fn") == 1


def test_logical_accounting_in_rows_and_bytes() -> None:
    """M_committed = T * delta and M_active = sum over the active set (0x05)."""
    row = 128 * KIB
    assert committed_bytes(28, row) == 3.5 * 1024 * KIB
    assert active_bytes([3, 3, 2], row) == 8 * row
    assert active_bytes([], row) == 0
    with pytest.raises(ValueError):
        committed_bytes(-1, row)


def test_block_sizing() -> None:
    assert block_bytes(16, 128 * KIB) == 2 * 1024 * KIB
    assert num_blocks_for_bytes(10 * 1024 * KIB, 16, 128 * KIB) == 5
