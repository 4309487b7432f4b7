"""Packed ragged forward vs the transformers reference (spec 0x04).

Every packed logits row must equal, within float32 tolerance, the reference
forward of its request alone; and no request's logits may depend on another
request's tokens (cross-request visibility = 0).
"""

from __future__ import annotations

import random

import pytest
import torch
from model_helpers import (
    ATOL,
    BlockHandout,
    assert_random_mix_matches,
    random_tokens,
    reference_logits,
    run_segments,
)

from iterserve.model.packing import SegmentSpec, pack

pytestmark = pytest.mark.slow

BLOCK_SIZE = 4


def _five_row_batch(tokens: dict[str, list[int]], b_start: int):
    """0x04 fixture rows: A5 (decode), B[b_start, b_start + 3) (chunk), C2 (decode)."""
    return [
        ("A", tokens["A"][5:6], 5, True),
        ("B", tokens["B"][b_start : b_start + 3], b_start, True),
        ("C", tokens["C"][2:3], 2, True),
    ]


def _prefill_history(model, cache, handout, tokens, b_start):
    """Commit A[0,5), C[0,2) and B[0,b_start) so the fixture rows have their prefixes."""
    history = [("A", tokens["A"][:5], 0, False), ("C", tokens["C"][:2], 0, False)]
    if b_start:
        history.append(("B", tokens["B"][:b_start], 0, False))
    run_segments(model, cache, handout, history)


def test_five_row_fixture_layout() -> None:
    """q = [1, 3, 1], Q_tot = 5, offsets [0, 1, 4, 5], positions [5, 0, 1, 2, 2]."""
    batch = pack(
        [
            SegmentSpec([15], 5, [0, 1], True),
            SegmentSpec([20, 21, 22], 0, [2], True),
            SegmentSpec([32], 2, [3], True),
        ],
        BLOCK_SIZE,
    )
    assert batch.query_lens == (1, 3, 1)
    assert batch.request_offsets.tolist() == [0, 1, 4, 5]
    assert batch.positions.tolist() == [5, 0, 1, 2, 2]
    assert batch.slot_mapping.tolist() == [1 * 4 + 1, 8, 9, 10, 3 * 4 + 2]
    assert batch.sample_rows.tolist() == [0, 3, 4]


@pytest.mark.parametrize("b_start", [0, 4], ids=["spec-B-fresh", "B-continues-cached-prefix"])
def test_five_row_fixture_matches_reference(tiny_model, tiny_reference, b_start: int) -> None:
    rng = random.Random(5)
    vocab = tiny_model.config.vocab_size
    tokens = {name: random_tokens(rng, 8, vocab) for name in "ABC"}
    cache = tiny_model.allocate_cache(num_blocks=32, block_size=BLOCK_SIZE)
    handout = BlockHandout(32, BLOCK_SIZE, seed=1)
    _prefill_history(tiny_model, cache, handout, tokens, b_start)
    logits = run_segments(tiny_model, cache, handout, _five_row_batch(tokens, b_start))
    expected = [
        reference_logits(tiny_reference, tokens["A"][:6])[5],
        reference_logits(tiny_reference, tokens["B"][: b_start + 3])[b_start + 2],
        reference_logits(tiny_reference, tokens["C"][:3])[2],
    ]
    torch.testing.assert_close(logits, torch.stack(expected), atol=ATOL, rtol=0)


def test_other_requests_tokens_change_nothing(tiny_model) -> None:
    """Perturbing B's tokens (current rows and cached prefix) leaves A and C bit-identical."""
    vocab = tiny_model.config.vocab_size
    results = []
    for b_seed in (1, 2):
        rng = random.Random(5)
        tokens = {name: random_tokens(rng, 8, vocab) for name in "AC"}
        tokens["B"] = random_tokens(random.Random(b_seed), 8, vocab)
        cache = tiny_model.allocate_cache(num_blocks=32, block_size=BLOCK_SIZE)
        handout = BlockHandout(32, BLOCK_SIZE, seed=1)
        _prefill_history(tiny_model, cache, handout, tokens, 4)
        results.append(run_segments(tiny_model, cache, handout, _five_row_batch(tokens, 4)))
    assert not torch.equal(results[0][1], results[1][1])
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][2], results[1][2])


@pytest.mark.parametrize("trial", range(4))
def test_random_mixes_match_reference(tiny_model, tiny_reference, trial: int) -> None:
    """Random interleavings of prefill chunks and decode rows over non-contiguous blocks."""
    assert_random_mix_matches(tiny_model, tiny_reference, seed=100 + trial, block_size=BLOCK_SIZE)


def test_only_sample_rows_get_logits(tiny_model) -> None:
    cache = tiny_model.allocate_cache(num_blocks=8, block_size=BLOCK_SIZE)
    batch = pack(
        [
            SegmentSpec([1, 2, 3], 0, [0], sample=False),
            SegmentSpec([4, 5], 0, [1], sample=True),
            SegmentSpec([6], 0, [2], sample=False),
        ],
        BLOCK_SIZE,
        tiny_model.device,
    )
    logits = tiny_model.forward(batch, cache)
    assert logits.shape == (1, tiny_model.config.vocab_size)
    assert logits.dtype == torch.float32
    assert batch.sample_segments == (1,)


def test_forward_rejects_out_of_range_batches(tiny_model) -> None:
    cache = tiny_model.allocate_cache(num_blocks=2, block_size=BLOCK_SIZE)
    device = tiny_model.device
    with pytest.raises(ValueError, match="block id 2"):
        tiny_model.forward(pack([SegmentSpec([1], 0, [2], True)], BLOCK_SIZE, device), cache)
    vocab = tiny_model.config.vocab_size
    with pytest.raises(ValueError, match="vocab_size"):
        tiny_model.forward(pack([SegmentSpec([vocab], 0, [0], True)], BLOCK_SIZE, device), cache)
    with pytest.raises(ValueError, match="block_size"):
        tiny_model.forward(pack([SegmentSpec([1], 0, [0], True)], 2, device), cache)
