"""The workload's kv section: bytes per row declared or derived from an
inline model config (0x05 delta_KV_row = 2 x L x H_kv x d_h x bytes)."""

from __future__ import annotations

import pytest

from iterserve.records.workload import WorkloadError, parse_workload

CONFIG = {"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
          "hidden_size": 256, "torch_dtype": "float32"}


def _workload(kv: dict) -> dict:
    return {"workload_id": "kv", "clock": "iteration",
            "capacity": {"max_num_batched_tokens": 8, "max_num_seqs": 2},
            "requests": [{"request_id": "a", "arrival": 0, "prompt_tokens": 4,
                          "max_output_tokens": 4}],
            "kv": kv}


def test_bytes_per_row_from_the_model_config() -> None:
    kv = parse_workload(_workload({"num_kv_blocks": 8, "model_config": CONFIG})).online.kv
    assert kv is not None
    assert kv.bytes_per_row == 2 * 4 * 2 * (256 // 8) * 4  # 2048


def test_a_disagreeing_declaration_is_an_error_naming_the_field() -> None:
    with pytest.raises(WorkloadError, match="kv.bytes_per_row"):
        parse_workload(_workload({"num_kv_blocks": 8, "bytes_per_row": 4096,
                                  "model_config": CONFIG}))


@pytest.mark.parametrize(("kv", "field"), [
    ({"num_kv_blocks": 0}, "num_kv_blocks"),
    ({"num_kv_blocks": 8, "preemption_mode": "evict"}, "preemption_mode"),
    ({"num_kv_blocks": 8, "bogus": 1}, "bogus"),
    ({"num_kv_blocks": 8, "model_config": {"torch_dtype": "float32"}}, "kv.model_config"),
])
def test_bad_kv_sections_are_one_line_errors(kv: dict, field: str) -> None:
    with pytest.raises(WorkloadError, match=field):
        parse_workload(_workload(kv))
