"""Decode-step attention: one padded group vs length groups, A/B in one process.

A decode step of B sequences whose contexts spread over [--min-context,
--max-context] (the issue-12 workload spreads over 32..512) runs through the
same weights and KV pool twice per trial, alternating which variant goes
first: `max_decode_groups=1` (every row padded to the longest) and the
default grouping (see iterserve.model.attention). It prints, per variant:

- K+V bytes gathered per layer (padding included) and the bytes the rows need;
- aten ops per forward and their self CPU time by op, from torch.profiler;
- the median step time over the trials, and the ratio of the two medians.

Both variants run back to back in one process, so a busy machine slows both
alike; still quote the ratio as "under contention" unless the machine is idle.

    .venv/bin/python benchmarks/bench_decode_attention.py MODEL_DIR --dtype bfloat16
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from iterserve.model.attention import MAX_DECODE_GROUPS, AttentionMetadata
from iterserve.model.llama import PackedCausalLM
from iterserve.model.loader import load_model
from iterserve.model.packing import PackedBatch, SegmentSpec, pack

BLOCK_SIZE = 16


def decode_batch(model: PackedCausalLM, args: argparse.Namespace):
    rng = random.Random(args.seed)
    lengths = [rng.randint(args.min_context, args.max_context) for _ in range(args.num_sequences)]
    per_seq = -(-(args.max_context + 2) // BLOCK_SIZE)
    cache = model.allocate_cache(args.num_sequences * per_seq, BLOCK_SIZE)
    specs = [SegmentSpec([rng.randrange(model.config.vocab_size)], n,
                         list(range(i * per_seq, (i + 1) * per_seq)), True)
             for i, n in enumerate(lengths)]
    return pack(specs, BLOCK_SIZE, model.device), cache, lengths


def timed(model: PackedCausalLM, batch: PackedBatch, cache) -> float:
    began = time.perf_counter()
    model.forward(batch, cache).argmax(dim=-1).tolist()
    return time.perf_counter() - began


def op_profile(model: PackedCausalLM, batch: PackedBatch, cache) -> tuple[int, list[str]]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model.forward(batch, cache)
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    self_us: Counter[str] = Counter()
    for event in events:
        self_us[event.name] += event.self_cpu_time_total
    top = [f"{name} {us / 1000:.1f} ms" for name, us in self_us.most_common(6)]
    return len(events), top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--num-sequences", type=int, default=64)
    parser.add_argument("--min-context", type=int, default=32)
    parser.add_argument("--max-context", type=int, default=512)
    parser.add_argument("--trials", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    grouped = load_model(args.model_dir, dtype=args.dtype)
    padded = PackedCausalLM(grouped.config, grouped.weights, max_decode_groups=1)
    batch, cache, lengths = decode_batch(grouped, args)
    config = grouped.config
    row_bytes = config.num_kv_heads * config.head_dim * grouped.dtype.itemsize
    needed = 2 * sum(n + 1 for n in lengths) * row_bytes
    variants = {"one padded group": padded, f"<= {MAX_DECODE_GROUPS} groups": grouped}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for model in variants.values():
        timed(model, batch, cache)  # warm-up
    for trial in range(args.trials):
        order = list(variants.items())
        for name, model in order if trial % 2 == 0 else order[::-1]:
            times[name].append(timed(model, batch, cache))
    print(f"B={args.num_sequences} contexts {args.min_context}..{args.max_context} "
          f"{args.dtype} threads={args.threads}; K+V bytes the rows need per layer: {needed:,}")
    for name, model in variants.items():
        metadata = AttentionMetadata.build(batch, config.sliding_windows, model.max_decode_groups)
        num_ops, top = op_profile(model, batch, cache)
        print(f"{name}: gathered {metadata.decode_gather_bytes(row_bytes):,} B/layer "
              f"({len(metadata.decode_groups)} groups), {num_ops} aten ops/forward, "
              f"median {statistics.median(times[name]) * 1e3:.1f} ms; top self CPU: "
              f"{'; '.join(top)}")
    first, second = (statistics.median(t) for t in times.values())
    print(f"median step ratio one-group / grouped: {first / second:.2f}")


if __name__ == "__main__":
    main()
