"""Shared helpers for the model tests: reference logits, block handout, segment runs."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from iterserve.model.kv_cache import PagedKVCache
from iterserve.model.llama import PackedCausalLM
from iterserve.model.packing import SegmentSpec, pack

ATOL = 1e-4  # float32 packed vs transformers reference

#: the shape every tiny test checkpoint of a family shares (3 layers, hidden
#: 64, 4 query / 2 KV heads); each family's config adds what sets it apart
TINY_SHAPE = {
    "vocab_size": 320,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
}


def reference_logits(reference, token_ids: Sequence[int]) -> torch.Tensor:
    """transformers logits [len, V] for one request alone, full sequence."""
    with torch.inference_mode():
        return reference(torch.tensor([list(token_ids)])).logits[0].float()


@dataclass
class BlockHandout:
    """Gives each request non-contiguous blocks from a shuffled pool (tests only)."""

    num_blocks: int
    block_size: int
    seed: int = 0
    _free: list[int] = field(default_factory=list)
    _tables: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._free = list(range(self.num_blocks))
        random.Random(self.seed).shuffle(self._free)

    def table(self, request: str, num_rows: int) -> tuple[int, ...]:
        """The request's block table, grown to cover rows [0, num_rows)."""
        table = self._tables.setdefault(request, [])
        while len(table) * self.block_size < num_rows:
            table.append(self._free.pop())
        return tuple(table)


def run_segments(
    model: PackedCausalLM,
    cache: PagedKVCache,
    handout: BlockHandout,
    segments: Sequence[tuple[str, Sequence[int], int, bool]],
) -> torch.Tensor:
    """Pack (request, tokens, start, sample) segments, run one forward, return CPU logits."""
    specs = [
        SegmentSpec(tokens, start, handout.table(request, start + len(tokens)), sample)
        for request, tokens, start, sample in segments
    ]
    return model.forward(pack(specs, cache.block_size, model.device), cache).cpu()


def random_tokens(rng: random.Random, length: int, vocab_size: int) -> list[int]:
    return [rng.randrange(vocab_size) for _ in range(length)]


def assert_random_mix_matches(model: PackedCausalLM, reference, seed: int, block_size: int) -> None:
    """Interleave random prefill chunks and decode rows of 2-5 requests over
    shuffled blocks; every sampled row must match the reference of its request alone."""
    rng = random.Random(seed)
    vocab = model.config.vocab_size
    num_requests = rng.randint(2, 5)
    sequences = {
        f"r{i}": random_tokens(rng, rng.randint(2, 14), vocab) for i in range(num_requests)
    }
    prompt_lens = {name: rng.randint(1, len(seq) - 1) for name, seq in sequences.items()}
    frontier = dict.fromkeys(sequences, 0)
    references = {name: reference_logits(reference, seq) for name, seq in sequences.items()}
    cache = model.allocate_cache(num_blocks=64, block_size=block_size)
    handout = BlockHandout(64, block_size, seed=seed)
    while any(frontier[n] < len(s) for n, s in sequences.items()):
        active = [n for n, s in sequences.items() if frontier[n] < len(s)]
        segments = []
        for name in rng.sample(active, rng.randint(1, len(active))):
            start = frontier[name]
            is_prefill = start < prompt_lens[name]
            end = rng.randint(start + 1, prompt_lens[name]) if is_prefill else start + 1
            segments.append((name, sequences[name][start:end], start, True))
            frontier[name] = end
        logits = run_segments(model, cache, handout, segments)
        for row, (name, tokens, start, _) in enumerate(segments):
            expected = references[name][start + len(tokens) - 1]
            torch.testing.assert_close(logits[row], expected, atol=ATOL, rtol=0)
