"""The paged attention kernel alone: a git revision's build vs the working tree's, interleaved.

One decode step's attention on the small preset's shapes (16 query heads,
4 kv heads, head_dim 64), B sequences with contexts uniform in
[--min-context, --max-context] (the issue-12 workload: 64 over 32..512),
block size 16, each sequence's blocks scattered over the pool. Each layer has
a pool of its own (--layers, default 8), so a "step" reads every layer's K/V
once, as a forward does, and the pools together outgrow the caches. The pools
sit on huge pages where the OS offers them, as the engine's do
(model/host_memory.py); `--pages 4k` puts them on ordinary pages.
`--chunk-rows N` makes each sequence a prefill chunk instead: its last
min(N, context + 1) positions as query rows (a chunk from 0 when N covers the
context), the shape of the issue-12 prefill steps with e.g. `--num-sequences 3
--chunk-rows 256 --min-context 100 --max-context 250`.

Both builds run on the same tensors; each trial times one step of each,
alternating which goes first. It prints the K+V bytes a step reads, each
build's median step time and GB/s, their ratio (candidate / baseline, below
1: the candidate is faster) and the largest output difference between them.

`--clock cpu` times with `time.thread_time`, which other processes on a
shared machine do not inflate; it counts only the calling thread, so use it
with `--threads 1`.

    .venv/bin/python benchmarks/bench_paged_kernel.py --baseline HEAD --threads 1 --clock cpu
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch

from bench_step_ab import REPO, extract, import_tree_modules, step_clock
from iterserve.model.host_memory import zeroed_bytes

BLOCK_SIZE = 16
NUM_HEADS, NUM_KV_HEADS, HEAD_DIM = 16, 4, 64


def make_step(args: argparse.Namespace, dtype: torch.dtype) -> tuple[list[tuple], int]:
    """Per layer, the kernel's arguments; and the K+V bytes one step reads."""
    rng = random.Random(args.seed)
    lengths = [rng.randint(args.min_context, args.max_context) for _ in range(args.num_sequences)]
    needs = [-(-(n + 1) // BLOCK_SIZE) for n in lengths]
    free = list(range(sum(needs)))
    rng.shuffle(free)
    tables = torch.zeros(len(lengths), max(needs), dtype=torch.long)
    for i, need in enumerate(needs):
        tables[i, :need] = torch.tensor([free.pop() for _ in range(need)])
    rows = [min(args.chunk_rows, n + 1) for n in lengths]
    offsets = torch.tensor([0, *itertools.accumulate(rows)], dtype=torch.long)
    context_lens = torch.tensor([n + 1 - q for n, q in zip(lengths, rows, strict=True)],
                                dtype=torch.long)
    generator = torch.Generator().manual_seed(args.seed)
    shape = (sum(needs), BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM)
    layers = []
    for _ in range(args.layers):
        query = torch.randn(sum(rows), NUM_HEADS, HEAD_DIM, generator=generator).to(dtype)
        pools = [on_pages(torch.randn(shape, generator=generator).to(dtype), args.pages)
                 for _ in range(2)]
        layers.append((query, *pools, tables, offsets, context_lens, args.window,
                       HEAD_DIM ** -0.5))
    row_bytes = NUM_KV_HEADS * HEAD_DIM * dtype.itemsize
    return layers, 2 * sum(n + 1 for n in lengths) * row_bytes * args.layers


def on_pages(tensor: torch.Tensor, pages: str) -> torch.Tensor:
    """A copy of `tensor` on huge pages (as the engine's pools) or 4 KiB ones."""
    num_bytes = tensor.numel() * tensor.element_size()
    buffer = torch.from_numpy(zeroed_bytes(num_bytes, huge_pages=pages == "huge"))
    return buffer.view(tensor.dtype).view(tensor.shape).copy_(tensor)


def step(ops: Any, layers: list[tuple], clock: Any) -> tuple[float, list[torch.Tensor]]:
    began = clock()
    outs = [ops.paged_attention(*layer) for layer in layers]
    return clock() - began, outs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default="HEAD", help="git revision of the baseline tree")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--num-sequences", type=int, default=64)
    parser.add_argument("--min-context", type=int, default=32)
    parser.add_argument("--max-context", type=int, default=512)
    parser.add_argument("--window", type=int, default=0, help="sliding window (0: none)")
    parser.add_argument("--chunk-rows", type=int, default=1,
                        help="query rows per sequence (1: decode; more: prefill chunks)")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--pages", choices=("huge", "4k"), default="huge",
                        help="what backs the pools (the engine's: huge where the OS offers them)")
    parser.add_argument("--trials", type=int, default=21)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args()
    clock = step_clock(parser, args)
    if args.chunk_rows < 1:
        parser.error("--chunk-rows must be >= 1")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as scratch:
        base = import_tree_modules(extract(args.baseline, Path(scratch)), ("kernels",))
        variants = {"baseline": base["kernels"].load_paged_decode()}
    variants["candidate"] = import_tree_modules(REPO / "src", ("kernels",))["kernels"].load_paged_decode()
    layers, num_bytes = make_step(args, getattr(torch, args.dtype))
    outs = {key: step(ops, layers, clock)[1] for key, ops in variants.items()}  # warm-up
    diff = max((a.float() - b.float()).abs().max().item()
               for a, b in zip(outs["baseline"], outs["candidate"], strict=True))
    times: dict[str, list[float]] = {key: [] for key in variants}
    for trial in range(args.trials):
        order = list(variants.items())
        for key, ops in order if trial % 2 == 0 else order[::-1]:
            times[key].append(step(ops, layers, clock)[0])
    print(f"baseline {args.baseline} vs working tree; B={args.num_sequences} "
          f"chunk rows {args.chunk_rows} contexts "
          f"{args.min_context}..{args.max_context} window={args.window} {args.dtype} "
          f"threads={args.threads} clock={args.clock} layers={args.layers} pages={args.pages}; "
          f"K+V bytes per step {num_bytes:,}")
    medians = {key: statistics.median(t) for key, t in times.items()}
    for key, median_s in medians.items():
        print(f"{key}: median {median_s * 1e3:.2f} ms/step, {num_bytes / median_s / 1e9:.1f} GB/s")
    print(f"ratio candidate / baseline {medians['candidate'] / medians['baseline']:.3f}; "
          f"max |difference| {diff:.3g}")


if __name__ == "__main__":
    main()
