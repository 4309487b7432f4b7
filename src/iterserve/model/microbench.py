"""Micro-benchmark of the packed forward: prefill throughput and one decode step.

Run `python -m iterserve.model.microbench MODEL_DIR --dtype bfloat16`; the
profile/bench CLI can call `measure_decode` directly. Token ids are drawn from
an injected seed, never a global RNG.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from iterserve.model.hub import resolve_model
from iterserve.model.kv_cache import PagedKVCache
from iterserve.model.llama import PackedCausalLM
from iterserve.model.loader import load_model
from iterserve.model.packing import SegmentSpec, pack
from iterserve.model.runtime import DTYPES
from iterserve.records.kv_abi import blocks_for


@dataclass(frozen=True, slots=True)
class DecodeMeasurement:
    num_sequences: int
    context_len: int
    prefill_tokens_per_s: float
    decode_step_s: float  # median over the timed steps

    @property
    def decode_tokens_per_s(self) -> float:
        return self.num_sequences / self.decode_step_s


def measure_decode(
    model: PackedCausalLM,
    num_sequences: int = 64,
    context_len: int = 200,
    num_steps: int = 8,
    block_size: int = 16,
    num_prefill_sequences: int = 8,
    seed: int = 0,
) -> DecodeMeasurement:
    """Time one prefill of `num_prefill_sequences` prompts of ~context_len tokens,
    then decode steps where all `num_sequences` contribute one row each (pack +
    forward + argmax). Sequences not prefilled decode over zeroed cache rows:
    the cost of a step depends on context lengths, not on cache contents."""
    rng = random.Random(seed)
    vocab_size = model.config.vocab_size
    blocks_per_sequence = blocks_for(context_len + num_steps + 8, block_size)
    cache = model.allocate_cache(num_sequences * blocks_per_sequence, block_size)
    tables = [
        list(range(i * blocks_per_sequence, (i + 1) * blocks_per_sequence))
        for i in range(num_sequences)
    ]
    lengths = [context_len + rng.randint(-8, 8) for _ in range(num_sequences)]
    prefilled = range(min(num_prefill_sequences, num_sequences))
    prefill = [
        SegmentSpec([rng.randrange(vocab_size) for _ in range(lengths[i])], 0, tables[i], True)
        for i in prefilled
    ]
    _timed(model, prefill[:1], cache)  # warm-up
    prefill_s = _timed(model, prefill, cache)
    step_times = []
    for step in range(num_steps):
        segments = [
            SegmentSpec([rng.randrange(vocab_size)], lengths[i] + step, tables[i], True)
            for i in range(num_sequences)
        ]
        step_times.append(_timed(model, segments, cache))
    return DecodeMeasurement(
        num_sequences=num_sequences,
        context_len=context_len,
        prefill_tokens_per_s=sum(lengths[i] for i in prefilled) / prefill_s,
        decode_step_s=statistics.median(step_times[2:] or step_times),
    )


def _timed(model: PackedCausalLM, segments: list[SegmentSpec], cache: PagedKVCache) -> float:
    started = time.perf_counter()
    logits = model.forward(pack(segments, cache.block_size, model.device), cache)
    logits.argmax(dim=-1).tolist()  # forces completion on asynchronous devices
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--num-sequences", type=int, default=64)
    parser.add_argument("--context-len", type=int, default=200)
    parser.add_argument("--num-steps", type=int, default=8)
    args = parser.parse_args()
    model = load_model(resolve_model(args.model_dir).path, DTYPES[args.dtype], args.device)
    result = measure_decode(model, args.num_sequences, args.context_len, args.num_steps)
    print(
        f"{args.device} {args.dtype} threads={torch.get_num_threads()} "
        f"prefill {result.prefill_tokens_per_s:.0f} tok/s | decode step "
        f"{result.decode_step_s * 1e3:.1f} ms = {result.decode_tokens_per_s:.0f} tok/s "
        f"(B={result.num_sequences}, ctx~{result.context_len})"
    )


if __name__ == "__main__":
    main()
