"""Forward-step A/B of two source trees in one process, interleaved.

The baseline is the package as of a git revision (extracted with `git archive`
into a scratch directory), the candidate is this working tree. Both load the
same checkpoint; each trial times one forward of each variant on the same
packed batch and a cache of its own, alternating which goes first, so a busy
machine slows both alike. Steps (contexts drawn uniformly from 32..512, the
issue-12 workload's spread):

- decode B=16 and B=64: one row per sequence;
- mixed: 56 decode rows plus one 256-row prefill chunk;
- prefill 512: a full token budget of prompt chunks and no decode row, the
  shape of the first ~19 steps of the issue-12 workload (a continuation chunk
  of a prompt begun in the step before, then whole prompts);
- mixed 40+472: 40 decode rows and three chunks (one a continuation).

`--clock cpu` times with `time.thread_time` (CPU seconds of the calling
thread; with `--threads 1` all of torch's intra-op work runs there), which
other processes on a shared machine do not inflate by preempting us; the
default `wall` clock is what a request sees on an idle machine.

It prints the median step time of each variant and the ratio
candidate / baseline per step (below 1: the candidate is faster), also as the
median of each trial's own ratio (the two steps of a trial run back to back,
so a load that changes between trials cancels out), and the top aten ops by
self CPU time of each variant's step. `same argmax` compares the two
variants' greedy tokens; in bf16 on random weights near-tied logits can flip
when a kernel sums in another order (compare each against float32 instead).

    .venv/bin/python benchmarks/bench_step_ab.py MODEL_DIR --baseline HEAD~1 --threads 1
"""

from __future__ import annotations

import argparse
import importlib
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

BLOCK_SIZE = 16
#: step name -> (decode rows, (start, rows) of each prefill chunk)
STEPS: dict[str, tuple[int, tuple[tuple[int, int], ...]]] = {
    "decode B=16": (16, ()),
    "decode B=64": (64, ()),
    "mixed 56+256": (56, ((0, 256),)),
    "prefill 512": (0, ((100, 140), (0, 226), (0, 146))),
    "mixed 40+472": (40, ((60, 150), (0, 200), (0, 122))),
}
REPO = Path(__file__).resolve().parents[1]


def import_tree(src_dir: Path) -> dict[str, ModuleType]:
    """The loader and packing modules of the tree in `src_dir`."""
    return import_tree_modules(src_dir, ("loader", "packing"))


def step_clock(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Callable[[], float]:
    """The clock `--clock` names (`cpu`: the calling thread's CPU time, so
    one torch thread only; `wall`: elapsed time)."""
    if args.clock == "cpu" and args.threads != 1:
        parser.error("--clock cpu counts the calling thread only: use it with --threads 1")
    return time.thread_time if args.clock == "cpu" else time.perf_counter


def import_tree_modules(src_dir: Path, names: tuple[str, ...]) -> dict[str, ModuleType]:
    """Import iterserve.model.NAME for each of `names` from `src_dir`, then
    drop them from sys.modules so another tree can be imported beside them."""
    for name in [m for m in sys.modules if m == "iterserve" or m.startswith("iterserve.")]:
        del sys.modules[name]
    sys.path.insert(0, str(src_dir))
    try:
        modules = {name: importlib.import_module(f"iterserve.model.{name}") for name in names}
    finally:
        sys.path.remove(str(src_dir))
        for name in [m for m in sys.modules if m == "iterserve" or m.startswith("iterserve.")]:
            del sys.modules[name]
    return modules


def extract(revision: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision, "src"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


class Variant:
    """One tree's model, its own caches, and a packer."""

    def __init__(self, modules: dict[str, ModuleType], model_dir: Path, dtype: str) -> None:
        self.model = modules["loader"].load_model(model_dir, dtype=dtype)
        self.segment_spec = modules["packing"].SegmentSpec
        self.pack = modules["packing"].pack
        self.batches: dict[str, tuple[Any, Any]] = {}

    def prepare(self, name: str, num_decode: int, chunks: tuple[tuple[int, int], ...],
                seed: int) -> None:
        """`num_decode` decode rows at contexts 32..512, then each (start, rows) chunk."""
        rng = random.Random(seed)
        per = -(-(512 + max((a + n for a, n in chunks), default=0) + 2) // BLOCK_SIZE)
        cache = self.model.allocate_cache((num_decode + len(chunks)) * per, BLOCK_SIZE)
        vocab = self.model.config.vocab_size
        specs = [self.segment_spec([rng.randrange(vocab)], rng.randint(32, 512),
                                   list(range(i * per, (i + 1) * per)), True)
                 for i in range(num_decode)]
        for index, (start, rows) in enumerate(chunks, start=num_decode):
            blocks = list(range(index * per, (index + 1) * per))
            specs.append(self.segment_spec([rng.randrange(vocab) for _ in range(rows)],
                                           start, blocks, True))
        self.batches[name] = (self.pack(specs, BLOCK_SIZE), cache)

    def step(self, name: str, clock: Any = time.perf_counter) -> tuple[float, torch.Tensor]:
        batch, cache = self.batches[name]
        began = clock()
        logits = self.model.forward(batch, cache)
        return clock() - began, logits


def top_ops(variant: Variant, name: str) -> str:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        variant.step(name)
    self_us: Counter[str] = Counter()
    events = [e for e in prof.events()
              if e.name.startswith(("aten::", "mkldnn::", "iterserve_kernels"))]
    for event in events:
        self_us[event.name] += event.self_cpu_time_total
    return f"{len(events)} aten/mkldnn/iterserve ops; " + "; ".join(
        f"{op} {us / 1000:.1f} ms" for op, us in self_us.most_common(5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--baseline", default="HEAD", help="git revision of the baseline tree")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trials", type=int, default=9)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--steps", default=",".join(STEPS),
                        help=f"comma-separated, of: {', '.join(STEPS)}")
    args = parser.parse_args()
    if unknown := set(args.steps.split(",")) - set(STEPS):
        parser.error(f"unknown steps {sorted(unknown)}; choose from {list(STEPS)}")
    clock = step_clock(parser, args)
    torch.set_num_threads(args.threads)
    steps = {name: STEPS[name] for name in args.steps.split(",")}
    with tempfile.TemporaryDirectory() as scratch:
        base = Variant(import_tree(extract(args.baseline, Path(scratch))), args.model_dir,
                       args.dtype)
    cand = Variant(import_tree(REPO / "src"), args.model_dir, args.dtype)
    variants = {"baseline": base, "candidate": cand}
    print(f"baseline {args.baseline} vs working tree; {args.dtype} threads={args.threads} "
          f"clock={args.clock}")
    for name, (num_decode, chunks) in steps.items():
        seed = list(STEPS).index(name)
        times: dict[str, list[float]] = {key: [] for key in variants}
        logits = {}
        for key, variant in variants.items():
            variant.prepare(name, num_decode, chunks, seed)
            _, logits[key] = variant.step(name)  # warm-up
        same = torch.equal(logits["baseline"].argmax(-1), logits["candidate"].argmax(-1))
        for trial in range(args.trials):
            order = list(variants.items())
            for key, variant in order if trial % 2 == 0 else order[::-1]:
                times[key].append(variant.step(name, clock)[0])
        base_s, cand_s = (statistics.median(times[key]) for key in variants)
        paired = statistics.median(c / b for b, c in zip(times["baseline"], times["candidate"],
                                                          strict=True))
        print(f"{name}: baseline {base_s * 1e3:.1f} ms, candidate {cand_s * 1e3:.1f} ms, "
              f"ratio {cand_s / base_s:.2f} (median of paired trials {paired:.2f}), "
              f"same argmax {same}")
        for key, variant in variants.items():
            print(f"    {key}: {top_ops(variant, name)}")


if __name__ == "__main__":
    main()
