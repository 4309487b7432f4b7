"""One OpenMP pool or two: decode forwards on a worker thread after set-up on
the main thread vs after set-up on a passing thread (model/omp_pools.py).

Each variant runs in a fresh process (a pool, once made, lives as long as its
thread), alternating from repeat to repeat:

- ``main-setup``: load the model, allocate the KV pool and warm up on the main
  thread, then time forwards on a worker thread (what ``load_runtime`` did
  before; two pools alive);
- ``passing-setup``: the same set-up through ``on_passing_thread``, then the
  same forwards on a worker thread (one pool alive);
- ``main-only``: set-up and forwards on the main thread (one pool; the
  reference a single-threaded driver such as vLLM's ``LLM`` gets).

It prints each variant's median decode-forward time (B sequences, contexts
uniform in 32..512, the small preset's shapes) and the ratios. Idle machine
only: the figures are wall times.

    .venv/bin/python benchmarks/bench_omp_pools.py MODEL_DIR --repeats 3
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

VARIANTS = ("main-setup", "passing-setup", "main-only")
BLOCK_SIZE = 16


def _set_up(model_dir: Path, num_sequences: int, threads: int):  # -> (model, batch, cache)
    import torch

    from iterserve.model.loader import load_model
    from iterserve.model.packing import SegmentSpec, pack

    torch.set_num_threads(threads)
    model = load_model(model_dir, dtype="bfloat16")
    rng = random.Random(0)
    lengths = [rng.randint(32, 512) for _ in range(num_sequences)]
    per_seq = -(-(512 + 2) // BLOCK_SIZE)
    cache = model.allocate_cache(num_sequences * per_seq, BLOCK_SIZE)
    specs = [SegmentSpec([rng.randrange(model.config.vocab_size)], n,
                         list(range(i * per_seq, (i + 1) * per_seq)), True)
             for i, n in enumerate(lengths)]
    batch = pack(specs, BLOCK_SIZE, model.device)
    for _ in range(3):
        model.forward(batch, cache)
    return model, batch, cache


def _forwards_ms(model, batch, cache, trials: int) -> list[float]:
    times = []
    for _ in range(trials):
        began = time.perf_counter()
        model.forward(batch, cache).argmax(dim=-1).tolist()
        times.append((time.perf_counter() - began) * 1e3)
    return times


def worker(args: argparse.Namespace) -> None:
    from iterserve.model.omp_pools import on_passing_thread

    def set_up():  # -> (model, batch, cache)
        return _set_up(args.model_dir, args.num_sequences, args.threads)

    if args.variant == "main-only":
        times = _forwards_ms(*set_up(), args.trials)
    else:
        parts = set_up() if args.variant == "main-setup" else on_passing_thread(set_up)
        out: list[list[float]] = []
        thread = threading.Thread(target=lambda: out.append(_forwards_ms(*parts, args.trials)))
        thread.start()
        thread.join()
        times = out[0]
    print(json.dumps({"variant": args.variant, "median_ms": statistics.median(times)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--num-sequences", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        return worker(args)
    medians: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for repeat in range(args.repeats):
        shift = repeat % len(VARIANTS)
        for variant in VARIANTS[shift:] + VARIANTS[:shift]:
            line = subprocess.run(
                [sys.executable, __file__, str(args.model_dir), "--variant", variant,
                 "--num-sequences", str(args.num_sequences), "--threads", str(args.threads),
                 "--trials", str(args.trials)],
                check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            medians[variant].append(json.loads(line)["median_ms"])
    reference = statistics.median(medians["main-only"])
    print(f"B={args.num_sequences} decode forwards, bf16, {args.threads} threads, "
          f"medians of {args.repeats} processes per variant")
    for variant, values in medians.items():
        median = statistics.median(values)
        print(f"{variant:14s} {median:6.1f} ms  ({median / reference:.2f}x main-only)  "
              f"runs {', '.join(f'{v:.1f}' for v in values)}")


if __name__ == "__main__":
    main()
