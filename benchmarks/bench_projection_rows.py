"""What a new row count costs the packed (oneDNN) projections, and what the
decode-row buckets cost instead.

For each projection shape of the small preset (bf16, oneDNN-packed weights,
one torch thread, thread CPU time): the first product at a row count never
seen before (oneDNN builds and JIT-compiles a primitive for it) against the
steady cost of the same product, and, at decode sizes, the steady cost of
the exact row count against its bucket (model.projection.bucketed_rows).

    .venv/bin/python benchmarks/bench_projection_rows.py
    .venv/bin/python benchmarks/bench_projection_rows.py --rows 3 17 41 59 300
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from iterserve.model.projection import bucketed_rows, packing_pays

#: (name, out features, in features) of the small preset's projections.
SHAPES = (("qkv", 1536, 1024), ("o", 1024, 1024), ("gate_up", 5632, 1024),
          ("down", 1024, 2816), ("lm_head", 4096, 1024))


def product(x: torch.Tensor, weight: torch.Tensor) -> None:
    torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")


def cpu_ms(fn, *args) -> float:  # type: ignore[no-untyped-def]
    began = time.thread_time()
    fn(*args)
    return (time.thread_time() - began) * 1e3


def steady_ms(x: torch.Tensor, weight: torch.Tensor, repeats: int) -> float:
    return statistics.median(cpu_ms(product, x, weight) for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[3, 17, 41, 59, 300, 450])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    if not packing_pays(torch.bfloat16, torch.device("cpu")):
        raise SystemExit("this CPU's oneDNN has no native bf16: the packed path does not run here")
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    print("| shape | rows | first product ms | steady ms | primitive build ms "
          "| bucket | bucket steady ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, out_features, in_features in SHAPES:
        weight = torch.ops.mkldnn._reorder_linear_weight(
            (torch.randn(out_features, in_features, generator=generator) * 0.02)
            .to(torch.bfloat16), 64)
        for rows in args.rows:
            x = torch.randn(rows, in_features, generator=generator).to(torch.bfloat16)
            first = cpu_ms(product, x, weight)
            steady = steady_ms(x, weight, args.repeats)
            bucket = bucketed_rows(rows)
            padded = torch.nn.functional.pad(x, (0, 0, 0, bucket - rows))
            product(padded, weight)
            bucket_ms = steady_ms(padded, weight, args.repeats)
            print(f"| {name} | {rows} | {first:.2f} | {steady:.2f} | {first - steady:.2f} "
                  f"| {bucket} | {bucket_ms:.2f} |")


if __name__ == "__main__":
    main()
