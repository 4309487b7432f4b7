"""The paged attention op inside a decode forward vs the same calls alone (issue 12).

One decode step of B sequences (contexts uniform in 32..512, blocks shuffled
over a pool sized for 512 rows each, K/V filled with random values and the
pool committed, as the engine's) on a checkpoint. It times, in one process:

- the whole forward (median of --trials);
- each layer's attention call inside the forward (every call wrapped);
- the eight captured calls again, back to back, outside the forward (cold:
  each layer's K/V is read once, as in the forward);
- layer 0's call repeated at once (its K/V partly cache-resident).

The difference between the first and second figure is what the forward's
context costs the kernel (caches, prefetchers, thread wake-ups); the second
against the K/V bytes is the kernel's own bandwidth. Idle machine only.

    .venv/bin/python benchmarks/bench_attention_in_forward.py /work/scratch/models/small
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import iterserve.model.attention as attention
from iterserve.model.loader import load_model
from iterserve.model.packing import SegmentSpec, pack

BLOCK_SIZE = 16


def decode_step(model: Any, num_sequences: int, seed: int) -> tuple[Any, Any, list[int]]:
    """A packed decode batch over a committed, randomly filled, shuffled
    pool; with its sequences' context lengths."""
    rng = random.Random(seed)
    lengths = [rng.randint(32, 512) for _ in range(num_sequences)]
    per_seq = -(-(512 + 2) // BLOCK_SIZE)
    cache = model.allocate_cache(num_sequences * per_seq, BLOCK_SIZE, commit=True)
    for pool in (*cache.key_pools, *cache.value_pools):
        pool.copy_(torch.randn(pool.shape).to(pool.dtype))
    ids = list(range(num_sequences * per_seq))
    rng.shuffle(ids)
    specs = [SegmentSpec([rng.randrange(model.config.vocab_size)], n,
                         ids[i * per_seq:(i + 1) * per_seq], True)
             for i, n in enumerate(lengths)]
    return pack(specs, BLOCK_SIZE, model.device), cache, lengths


def median_ms(fn: Callable[[], Any], trials: int) -> float:
    times = []
    for _ in range(trials):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--num-sequences", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trials", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model(args.model_dir, dtype="bfloat16")
    batch, cache, lengths = decode_step(model, args.num_sequences, args.seed)
    for _ in range(3):
        model.forward(batch, cache)
    forward_ms = median_ms(lambda: model.forward(batch, cache), args.trials)

    calls: list[tuple] = []
    inside: list[float] = []
    attend = attention._attend_in_place

    def timed_attend(query: Any, key_pool: Any, value_pool: Any, rows: Any, window: Any) -> Any:
        calls.append((query, key_pool, value_pool, rows, window))
        began = time.perf_counter()
        out = attend(query, key_pool, value_pool, rows, window)
        inside.append(time.perf_counter() - began)
        return out

    attention._attend_in_place = timed_attend
    try:
        for _ in range(args.trials):
            model.forward(batch, cache)
    finally:
        attention._attend_in_place = attend
    layers = calls[:model.config.num_layers]

    def back_to_back() -> None:
        for call in layers:
            attend(*call)

    alone_ms = median_ms(back_to_back, args.trials) / len(layers)
    repeated_ms = median_ms(lambda: attend(*layers[0]), args.trials * 2)
    config = model.config
    row_bytes = 2 * config.num_kv_heads * config.head_dim * model.dtype.itemsize
    layer_bytes = sum(n + 1 for n in lengths) * row_bytes
    print(f"B={args.num_sequences} decode, bf16, {args.threads} threads, "
          f"{config.num_layers} layers; medians of {args.trials}")
    print(f"forward                            {forward_ms:7.2f} ms")
    print(f"attention per layer, in forward    {statistics.median(inside) * 1e3:7.3f} ms")
    print(f"attention per layer, back to back  {alone_ms:7.3f} ms")
    print(f"layer 0's call repeated at once    {repeated_ms:7.3f} ms")
    print(f"K+V bytes per layer {layer_bytes:,}: {layer_bytes / alone_ms / 1e6:.1f} GB/s back "
          f"to back, {layer_bytes / statistics.median(inside) / 1e9:.1f} GB/s in the forward")


if __name__ == "__main__":
    main()
