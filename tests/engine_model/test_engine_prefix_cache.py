"""Prefix cache through the engine (issue 5): a request sharing a
block-aligned prefix with a finished one computes only the uncached suffix,
and its greedy output equals a cold run's."""

from __future__ import annotations

import pytest
from engine_model_helpers import GREEDY, assert_same_outputs, make_prompts

from iterserve.llm import LLM
from log_rows import as_rows

BLOCK_SIZE = 4
NUM_DECODE_ROWS = GREEDY.max_tokens - 1  # the last token is emitted, never computed


def _computed_and_skipped(llm: LLM, prompt: list[int]):
    """Run one request; returns (output, rows computed, cached rows not
    computed) for it alone. A hit on the cached blocks of a finished request
    is claimed before planning (0x0E: U = S - H_hit, evictable blocks
    included), so those rows are never planned, rather than planned and
    skipped by the executor; both count as not computed."""
    executor = llm.executor
    computed, skipped = executor.num_computed_rows, executor.num_cached_rows_skipped
    planned = executor.kv.stats().num_planned_hit_rows
    out = llm.generate([prompt], GREEDY)[0]
    return (out, executor.num_computed_rows - computed,
            executor.num_cached_rows_skipped - skipped
            + executor.kv.stats().num_planned_hit_rows - planned)


@pytest.fixture(scope="module")
def first_and_tail(tiny_model) -> tuple[list[int], list[int]]:
    vocab = tiny_model.config.vocab_size
    first, tail = make_prompts([16, 5], vocab, seed=3)
    return first, tail


@pytest.mark.slow
def test_shared_prompt_prefix_computes_only_the_suffix(tiny_dir, first_and_tail) -> None:
    first, tail = first_and_tail
    second = first[:12] + tail  # 3 shared blocks, then a different suffix
    llm = LLM(tiny_dir, block_size=BLOCK_SIZE)
    _, computed, skipped = _computed_and_skipped(llm, first)
    assert (computed, skipped) == (16 + NUM_DECODE_ROWS, 0)
    warm, computed, skipped = _computed_and_skipped(llm, second)
    assert skipped == 12
    assert computed == len(second) - 12 + NUM_DECODE_ROWS
    assert llm.executor.kv.stats().num_prefix_hit_tokens == 12

    cold_llm = LLM(tiny_dir, block_size=BLOCK_SIZE, enable_prefix_caching=False)
    cold, computed, skipped = _computed_and_skipped(cold_llm, second)
    assert (computed, skipped) == (len(second) + NUM_DECODE_ROWS, 0)
    assert_same_outputs([warm], [cold])


@pytest.mark.slow
def test_prefix_through_generated_tokens_is_reused(tiny_dir, first_and_tail) -> None:
    """A follow-up turn (prompt + output + new text) hits the blocks the first
    request filled while decoding, not only its prompt blocks."""
    first, tail = first_and_tail
    llm = LLM(tiny_dir, block_size=BLOCK_SIZE)
    answer = llm.generate([first], GREEDY)[0]
    follow_up = first + list(answer.token_ids) + tail[:3]  # 31 tokens
    # rows [0, 27) were computed for the first request: 6 full blocks = 24 rows
    warm, computed, skipped = _computed_and_skipped(llm, follow_up)
    assert skipped == 24
    assert computed == len(follow_up) - 24 + NUM_DECODE_ROWS
    cold = LLM(tiny_dir, block_size=BLOCK_SIZE, enable_prefix_caching=False).generate(
        [follow_up], GREEDY)[0]
    assert_same_outputs([warm], [cold])


@pytest.mark.slow
def test_identical_prompt_recomputes_its_last_block_only(tiny_dir, first_and_tail) -> None:
    """A full hit still computes the sampling row: the block manager matches at
    most P - 1 rows, so a block-aligned repeat recomputes its last block."""
    first, _ = first_and_tail
    llm = LLM(tiny_dir, block_size=BLOCK_SIZE)
    cold, _, _ = _computed_and_skipped(llm, first)
    warm, computed, skipped = _computed_and_skipped(llm, first)
    assert (skipped, computed) == (12, BLOCK_SIZE + NUM_DECODE_ROWS)
    assert_same_outputs([warm], [cold])


@pytest.mark.slow
def test_shared_prefix_is_skipped_under_chunked_prefill(tiny_dir, first_and_tail) -> None:
    first, tail = first_and_tail
    second = first[:12] + tail
    llm = LLM(tiny_dir, block_size=BLOCK_SIZE, long_prefill_token_threshold=4)
    llm.generate([first], GREEDY)
    warm, computed, skipped = _computed_and_skipped(llm, second)
    assert skipped == 12
    assert computed == len(second) - 12 + NUM_DECODE_ROWS
    cold = LLM(tiny_dir, block_size=BLOCK_SIZE, long_prefill_token_threshold=4,
               enable_prefix_caching=False).generate([second], GREEDY)[0]
    assert_same_outputs([warm], [cold])


@pytest.mark.slow
def test_a_waiting_requests_hit_is_planned_and_outputs_match_a_cold_run(
        tiny_dir, first_and_tail) -> None:
    """Issue 9 step 7 (0x0E): the second request waits (token budget 16)
    while the first holds the shared blocks; its hit is published before
    planning, so its prefill is planned as [12, 17), not [0, 17), and its
    greedy output equals a run without any prefix cache."""
    import io
    import json

    first, tail = first_and_tail
    second = first[:12] + tail
    llm = LLM(tiny_dir, block_size=BLOCK_SIZE, max_num_batched_tokens=16)
    log = io.StringIO()
    warm = llm.generate([first, second], GREEDY, decision_log=log)
    prefills = [(w["start"], w["end"]) for line in log.getvalue().splitlines()
                if (doc := as_rows(json.loads(line)))["type"] == "iteration"
                for w in doc["plan"]["work"] if w["kind"] == "PREFILL_CHUNK"]
    assert prefills == [(0, 16), (12, 17)]
    assert '"claimed_prefix_rows":{' in log.getvalue()
    assert llm.executor.kv.stats().num_planned_hit_rows == 12
    cold_llm = LLM(tiny_dir, block_size=BLOCK_SIZE, enable_prefix_caching=False)
    cold = [cold_llm.generate([prompt], GREEDY)[0] for prompt in (first, second)]
    assert_same_outputs(warm, cold)
