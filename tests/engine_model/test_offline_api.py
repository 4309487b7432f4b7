"""The offline API as vLLM users expect it (issue 10 step 8)."""

from __future__ import annotations

import pytest

GREEDY_KW = dict(max_tokens=4, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(tiny_dir):
    from iterserve import LLM

    return LLM(model=tiny_dir, num_kv_blocks=10, block_size=4, max_model_len=48)


def test_top_level_imports_and_one_string_is_one_request(llm):
    from iterserve import SamplingParams

    outs = llm.generate("Hello there", SamplingParams(**GREEDY_KW))
    assert len(outs) == 1
    out = outs[0]
    assert out.outputs[0].text == out.text
    assert out.outputs[0].token_ids == out.token_ids and len(out.token_ids) == 4
    assert out.outputs[0].finish_reason == "length"
    assert out.metrics.first_token_ms is not None
    assert out.metrics.arrival_ms <= out.metrics.first_token_ms <= out.metrics.finish_ms
    ids = llm.tokenizer.encode("Hello there")
    same = llm.generate(ids, SamplingParams(**GREEDY_KW))  # one flat id list: one request
    assert len(same) == 1 and same[0].token_ids == out.token_ids


def test_too_long_requests_are_refused_at_submission(llm):
    from iterserve import SamplingParams

    with pytest.raises(ValueError, match="maximum model length 48"):
        llm.generate(["hi"], SamplingParams(max_tokens=100))
    with pytest.raises(ValueError, match="needs 11 KV blocks; the pool has 10"):
        llm.generate([[5] * 40], SamplingParams(max_tokens=4))  # within max_model_len


def test_chat_and_progress_bar(llm):
    from iterserve import SamplingParams

    messages = [{"role": "user", "content": "hi"}]
    out = llm.chat(messages, SamplingParams(**GREEDY_KW), use_tqdm=True)[0]
    want = llm.generate([llm.tokenizer.apply_chat_template(messages)],
                        SamplingParams(**GREEDY_KW))[0]
    assert out.token_ids == want.token_ids


def test_kv_cache_memory_sizes_the_pool_from_bytes_per_row(tiny_dir):
    """--kv-cache-memory for the LLM API: whole blocks of block_size x bytes per row (0x05)."""
    from iterserve import LLM
    from iterserve.model.loader import load_config
    from iterserve.records.kv_abi import bytes_per_row

    config = load_config(tiny_dir)
    row_bytes = bytes_per_row(config.num_layers, config.num_kv_heads, config.head_dim, 4)
    llm = LLM(model=tiny_dir, kv_cache_memory=12 * 4 * row_bytes + 1, block_size=4)
    try:
        assert llm.executor.cache.num_blocks == 12
        out = llm.generate(["hello"], _greedy())[0]
        assert len(out.token_ids) == GREEDY_KW["max_tokens"]
    finally:
        llm.close()


def test_default_pool_holds_the_worst_case_when_memory_allows(tiny_dir):
    """No size given: max_num_seqs full-length sequences (here 3 x 48 rows / 4 = 36
    blocks), far under half the free memory; the pages are only touched when written."""
    from iterserve import LLM

    llm = LLM(model=tiny_dir, block_size=4, max_num_seqs=3, max_model_len=48)
    try:
        assert llm.executor.cache.num_blocks == 3 * 48 // 4
    finally:
        llm.close()


def _greedy():
    from iterserve import SamplingParams

    return SamplingParams(**GREEDY_KW)
