"""The host-side ops of the decoder layer, now against before: a call-by-call
A/B inside the side-by-side workload (issue 12).

``model/csrc/fused_ops.cpp`` is built twice into two op namespaces: as it
is (rows split over threads only past 2^17 elements: a decode batch's
RMSNorm and RoPE on the calling thread) and with the old fixed grain of 16 rows
(``-DITERSERVE_FUSED_GRAIN_ROWS=16``: any batch over 16 rows split in two).
The K/V write is ``write_kv`` (one call, one thread) now and was two
``index_copy_`` (``PagedKVCache.write``) before.
The workload of ``bench_vs_vllm.py`` (64 requests, token budget 512, bf16,
2 threads) then runs once on iterserve, and every call of
``fused_add_rms_norm``, ``silu_and_mul``, ``rotary_in_place`` and
``write_kv`` alternates between now and before, each call timed. Both builds see the same batches in
the same minutes, so the host's drift (3x on this shared machine from one
minute to the next) falls on both arms alike; the ratio is the figure, not
the microseconds. Same results either way (the ops are row-wise).

    .venv/bin/python benchmarks/bench_fused_grain.py
    .venv/bin/python benchmarks/bench_fused_grain.py --model /work/scratch/models/small
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils import cpp_extension

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_vs_vllm  # noqa: E402
from iterserve.model import kernels, llama  # noqa: E402
from iterserve.model.make_model import cached_model  # noqa: E402

OPS = ("fused_add_rms_norm", "silu_and_mul", "rotary_in_place", "write_kv")
ARMS = {"now": [], "before": ["-DITERSERVE_FUSED_GRAIN_ROWS=16"]}
DECODE_ROWS = 64  # calls on at most this many rows are decode-sized


def build(name: str, defines: list[str], build_dir: Path) -> Any:
    """fused_ops.cpp as the op namespace `name`."""
    source = next(s for s in kernels.SOURCES if s.name == "fused_ops.cpp")
    directory = build_dir / name
    directory.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(name=name, sources=[str(source)], build_directory=str(directory),
                       extra_cflags=[*kernels.CFLAGS, f"-DITERSERVE_OPS={name}", *defines],
                       extra_include_paths=[str(source.parent)], extra_ldflags=["-fopenmp"],
                       is_python_module=False, verbose=False)
    return getattr(torch.ops, name)


class Alternating:
    """Stands in for the model's native ops: the three fused ops alternate
    between the arms call by call, timed; every other op is the real one."""

    def __init__(self, real: Any, arms: dict[str, Any]) -> None:
        self._real, self._arms = real, arms
        self._next = itertools.cycle(arms)
        self.times: dict[tuple[str, str, bool], list[float]] = {}

    def __getattr__(self, op: str) -> Callable[..., Any]:
        if op not in OPS:
            return getattr(self._real, op)

        def call(*args: Any) -> Any:
            arm = next(self._next)
            run_op = index_copy_kv if (op, arm) == ("write_kv", "before") else \
                getattr(self._arms[arm], op)
            began = time.perf_counter()
            out = run_op(*args)
            elapsed = time.perf_counter() - began
            rows = args[2 if op == "write_kv" else 0].shape[0]  # write_kv: its slots
            key = (op, arm, rows <= DECODE_ROWS)
            self.times.setdefault(key, []).append(elapsed)
            return out
        return call


def index_copy_kv(key_pool: torch.Tensor, value_pool: torch.Tensor, slots: torch.Tensor,
                  keys: torch.Tensor, values: torch.Tensor) -> None:
    """The K/V write before write_kv (PagedKVCache.write)."""
    for pool, rows in ((key_pool, keys), (value_pool, values)):
        pool.view(-1, *pool.shape[2:]).index_copy_(0, slots, rows)


def run(model: Path, arms: dict[str, Any]) -> Alternating:
    """The side-by-side workload on iterserve with the ops alternating."""
    holder: dict[str, Alternating] = {}
    forward = llama.PackedCausalLM.forward

    def patched(self: llama.PackedCausalLM, batch: Any, cache: Any) -> torch.Tensor:
        if "ops" not in holder:
            holder["ops"] = self.native_ops = Alternating(self.native_ops, arms)
        return forward(self, batch, cache)

    llama.PackedCausalLM.forward = llama.PackedCausalLM.__call__ = patched  # type: ignore[method-assign]
    bench_vs_vllm.iterserve_in_process(model)
    return holder["ops"]


def table(ops: Alternating) -> list[str]:
    lines = [f"{'op':20s} {'rows':>6s} " + " ".join(f"{arm:>20s}" for arm in ARMS) + "   ratio"]
    for op in OPS:
        for decode in (True, False):
            means = []
            for arm in ARMS:
                times = ops.times.get((op, arm, decode), [])
                means.append(sum(times) / len(times) if times else float("nan"))
            size = f"<={DECODE_ROWS}" if decode else f">{DECODE_ROWS}"
            cells = " ".join(f"{m * 1e6:12.1f} us/call" for m in means)
            lines.append(f"{op:20s} {size:>6s} {cells}   {means[1] / means[0]:5.2f}x")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None,
                        help="a bf16-capable checkpoint dir (default: the small preset)")
    parser.add_argument("--build-dir", type=Path, default=None,
                        help="where the two builds go (default: a temporary directory)")
    args = parser.parse_args(argv)
    model = args.model or cached_model(bench_vs_vllm.CACHE_DIR / "small-seed0", "small")
    with tempfile.TemporaryDirectory() as tmp:
        build_dir = args.build_dir or Path(tmp)
        arms = {arm: build(f"grain_ab_{index}", defines, build_dir)
                for index, (arm, defines) in enumerate(ARMS.items())}
        ops = run(model, arms)
    print("\n".join(table(ops)))
    print("ratio: before / now (above 1: before was slower)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
