"""Where decode-sized batches are padded to their row bucket: once at the
embedding, or in each packed projection. A forward-by-forward A/B inside the
side-by-side workload (issue 12).

The packed bf16 projections run a batch of at most 64 rows at a multiple of
8 rows (model.projection). Padding inside each projection copies its input
(the MLP's 2,816-wide one split over threads); the model now pads the token
ids once and carries the padded rows through the row-wise stages
(``PackedCausalLM._row_padded``), so only attention's output is padded again,
once per layer. The workload of ``bench_vs_vllm.py`` (64 requests, token
budget 512, bf16, 2 threads) runs once on iterserve, and every forward of
at most 64 rows alternates between the two (the model's ``_buckets_rows``
switch), timed. Both arms run in the same minutes on the same batches; the
ratio is the figure. The logits and K/V rows are bit for bit the same
(tests/model/test_projection.py).

    .venv/bin/python benchmarks/bench_row_padding.py
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_vs_vllm  # noqa: E402
from iterserve.model import llama  # noqa: E402
from iterserve.model.make_model import cached_model  # noqa: E402

ARMS = ("padded at the embedding", "padded in each projection")
DECODE_ROWS = 64


def run(model: Path) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    arms = itertools.cycle(ARMS)
    forward = llama.PackedCausalLM.forward

    def alternating(self: llama.PackedCausalLM, batch: Any, cache: Any) -> torch.Tensor:
        if batch.num_rows > DECODE_ROWS:
            return forward(self, batch, cache)
        arm = next(arms)
        self._buckets_rows = arm == ARMS[0]
        began = time.perf_counter()
        logits = forward(self, batch, cache)
        times[arm].append(time.perf_counter() - began)
        self._buckets_rows = True
        return logits

    llama.PackedCausalLM.forward = llama.PackedCausalLM.__call__ = alternating  # type: ignore[method-assign]
    bench_vs_vllm.iterserve_in_process(model)
    return times


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None,
                        help="a bf16-capable checkpoint dir (default: the small preset)")
    args = parser.parse_args(argv)
    model = args.model or cached_model(bench_vs_vllm.CACHE_DIR / "small-seed0", "small")
    times = run(model)
    means = {arm: sum(t) / len(t) for arm, t in times.items() if t}
    if len(means) < 2:
        raise SystemExit("no decode-sized forward ran on a packed model (bf16 oneDNN needed)")
    for arm in ARMS:
        print(f"{arm:28s} {len(times[arm]):5d} forwards  {means[arm] * 1e3:7.2f} ms each")
    print(f"ratio: {means[ARMS[1]] / means[ARMS[0]]:.3f}x (in each projection / at the embedding)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
