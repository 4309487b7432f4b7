"""Chunked prefill is causally equivalent to full prefill (spec 0x09).

For a prompt of S = 7 tokens, every composition of 7 into chunk sizes (2^6 =
64 partitions) yields the full-prefill logits at each chunk end and the same
greedy continuation.
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch
from model_helpers import ATOL, BlockHandout, random_tokens, reference_logits, run_segments

pytestmark = pytest.mark.slow

PROMPT_LEN = 7
NUM_DECODE_STEPS = 3
BLOCK_SIZE = 2


def _compositions(total: int) -> list[list[int]]:
    """All ordered partitions of `total` into positive chunk sizes."""
    result = []
    for cuts in itertools.product([False, True], repeat=total - 1):
        sizes, size = [], 1
        for cut in cuts:
            if cut:
                sizes.append(size)
                size = 1
            else:
                size += 1
        result.append([*sizes, size])
    return result


def _run_chunked(
    model, prompt: list[int], sizes: list[int]
) -> tuple[list[torch.Tensor], list[int]]:
    """Prefill in chunks (logits at every chunk end), then greedy decode."""
    cache = model.allocate_cache(num_blocks=16, block_size=BLOCK_SIZE)
    handout = BlockHandout(16, BLOCK_SIZE, seed=sum(sizes) * len(sizes))
    chunk_logits, start = [], 0
    for size in sizes:
        chunk = prompt[start : start + size]
        chunk_logits.append(run_segments(model, cache, handout, [("p", chunk, start, True)])[0])
        start += size
    generated = [int(chunk_logits[-1].argmax())]
    for _ in range(NUM_DECODE_STEPS - 1):
        logits = run_segments(model, cache, handout, [("p", generated[-1:], start, True)])
        start += 1
        generated.append(int(logits[0].argmax()))
    return chunk_logits, generated


def test_compositions_cover_all_partitions() -> None:
    compositions = _compositions(PROMPT_LEN)
    assert len(compositions) == 2 ** (PROMPT_LEN - 1)
    assert all(sum(c) == PROMPT_LEN for c in compositions)
    assert len({tuple(c) for c in compositions}) == len(compositions)


def test_every_chunk_partition_matches_full_prefill(tiny_model, tiny_reference) -> None:
    prompt = random_tokens(random.Random(7), PROMPT_LEN, tiny_model.config.vocab_size)
    reference = reference_logits(tiny_reference, prompt)
    _, full_continuation = _run_chunked(tiny_model, prompt, [PROMPT_LEN])
    reference_continuation = reference_logits(tiny_reference, prompt + full_continuation[:-1])
    assert full_continuation == reference_continuation[PROMPT_LEN - 1 :].argmax(-1).tolist()
    for sizes in _compositions(PROMPT_LEN):
        chunk_logits, continuation = _run_chunked(tiny_model, prompt, sizes)
        ends = list(itertools.accumulate(sizes))
        for logits, end in zip(chunk_logits, ends, strict=True):
            torch.testing.assert_close(logits, reference[end - 1], atol=ATOL, rtol=0)
        assert continuation == full_continuation, f"chunks {sizes}"
