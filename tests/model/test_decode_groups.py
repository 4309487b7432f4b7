"""Single-row segments attended in groups of similar context length give the
same logits as one group padded to the longest row, and gather fewer bytes."""

from __future__ import annotations

import random

import pytest
import torch
from model_helpers import ATOL, BlockHandout, random_tokens, run_segments

from iterserve.model.attention import MIN_DECODE_GROUP_ROWS, AttentionMetadata, decode_groups
from iterserve.model.llama import PackedCausalLM
from iterserve.model.packing import SegmentSpec, pack


def _decode_batch(lengths: list[int], block_size: int = 4):
    handout = BlockHandout(4096, block_size)
    specs = [SegmentSpec([1], n, handout.table(f"r{i}", n + 1), True)
             for i, n in enumerate(lengths)]
    return pack(specs, block_size, "cpu")


def test_groups_cover_every_row_once_and_bound_the_padding() -> None:
    lengths = [random.Random(i).randint(8, 500) for i in range(40)]
    batch = _decode_batch(lengths)
    groups = decode_groups(batch, list(range(len(lengths))), max_groups=4)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert 1 < len(groups) <= 4 and all(len(g) >= MIN_DECODE_GROUP_ROWS for g in groups)
    grouped = AttentionMetadata.build(batch, [None], max_decode_groups=4)
    single = AttentionMetadata.build(batch, [None], max_decode_groups=1)
    assert grouped.decode_gather_bytes(1) < 0.75 * single.decode_gather_bytes(1)


def test_few_rows_stay_one_group_in_segment_order() -> None:
    batch = _decode_batch([5, 300, 40])
    assert decode_groups(batch, [0, 1, 2], max_groups=4) == [[0, 1, 2]]


@pytest.mark.slow
def test_grouped_decode_matches_one_padded_group(tiny_model) -> None:
    rng = random.Random(7)
    vocab = tiny_model.config.vocab_size
    # the torch backend: the in-place kernel (the default where built) has no groups
    grouped_model = PackedCausalLM(tiny_model.config, tiny_model.weights,
                                   attention_backend="torch")
    one_group = PackedCausalLM(tiny_model.config, tiny_model.weights, max_decode_groups=1,
                               attention_backend="torch")
    lengths = [rng.choice([3, 5, 9, 17, 33, 60]) for _ in range(24)]
    assert len(decode_groups(_decode_batch(lengths), list(range(24)), max_groups=4)) > 1
    cache = tiny_model.allocate_cache(num_blocks=512, block_size=4)
    handout = BlockHandout(512, 4, seed=1)
    prompts = {f"r{i}": random_tokens(rng, n, vocab) for i, n in enumerate(lengths)}
    run_segments(tiny_model, cache, handout,
                 [(name, tokens, 0, False) for name, tokens in prompts.items()])
    step = [(name, [rng.randrange(vocab)], len(tokens), True) for name, tokens in prompts.items()]
    step.insert(3, ("chunk", random_tokens(rng, 6, vocab), 0, True))  # a mixed batch
    grouped = run_segments(grouped_model, cache, handout, step)
    padded = run_segments(one_group, cache, handout, step)
    torch.testing.assert_close(grouped, padded, atol=ATOL, rtol=0)
