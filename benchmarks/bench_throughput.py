"""Offline throughput: iterserve (vllm, sarathi-serve) vs transformers static batching.

The issue-5 workload: the `small` preset (random weights, built into a cache
dir when missing), 64 requests with prompt lengths uniform in [32, 256] and
output lengths uniform in [16, 256] from a fixed seed, greedy, ignore_eos.
All requests arrive at t = 0. Every system runs in this process, on the same
threads and dtype, after one short warm-up run of its own.

- iterserve: ``LLM(model, policy=...).generate(prompts, per-request params)``;
  the KV pool holds the whole workload, so nothing is preempted.
- static: ``transformers`` ``generate`` over batches of 16 in arrival order,
  left-padded; each batch decodes for its longest request
  (``min_new_tokens = max_new_tokens``, so EOS cannot end it early). Only the
  tokens each request asked for count as output; the rest is the waste that
  static batching pays for.

Latency is wall time from the start of the run to the request's last token
(for a static batch: the end of its ``generate`` call). iterserve's per-step
callback gives the number of finished requests after every iteration, which
is all a latency distribution needs when every request arrives at t = 0.

    .venv/bin/python benchmarks/bench_throughput.py --dtype bfloat16 --threads 2
    .venv/bin/python benchmarks/bench_throughput.py --quick          # smoke run
    .venv/bin/python benchmarks/bench_throughput.py --profile-steps 40 --quick
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the checkpoint is local; never reach a hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from iterserve.llm import DTYPES, LLM  # noqa: E402
from iterserve.model.make_model import cached_model  # noqa: E402
from iterserve.records.sampling_params import SamplingParams  # noqa: E402

FIRST_PLAIN_TOKEN = 4  # ids below are special tokens in make_model's tokenizers
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "iterserve"


@dataclass(frozen=True, slots=True)
class Request:
    prompt_token_ids: tuple[int, ...]
    max_tokens: int


@dataclass(frozen=True, slots=True)
class Workload:
    num_requests: int
    prompt_lens: tuple[int, int]  # inclusive uniform range
    output_lens: tuple[int, int]
    seed: int

    def requests(self, vocab_size: int) -> list[Request]:
        rng = random.Random(self.seed)
        out = []
        for _ in range(self.num_requests):
            prompt_len = rng.randint(*self.prompt_lens)
            prompt = tuple(rng.randrange(FIRST_PLAIN_TOKEN, vocab_size) for _ in range(prompt_len))
            out.append(Request(prompt, rng.randint(*self.output_lens)))
        return out


@dataclass(frozen=True, slots=True)
class SystemResult:
    name: str
    elapsed_s: float
    num_output_tokens: int  # tokens the requests asked for (waste excluded)
    latencies_s: tuple[float, ...]
    num_iterations: int  # engine iterations, or decode steps summed over static batches
    outputs: tuple[tuple[int, ...], ...]

    @property
    def output_tokens_per_s(self) -> float:
        return self.num_output_tokens / self.elapsed_s

    def summary(self) -> dict[str, float | int | str]:
        lat = sorted(self.latencies_s)
        return {
            "system": self.name,
            "elapsed_s": round(self.elapsed_s, 3),
            "output_tokens": self.num_output_tokens,
            "output_tokens_per_s": round(self.output_tokens_per_s, 2),
            "latency_mean_s": round(statistics.fmean(lat), 3),
            "latency_p50_s": round(_percentile(lat, 50), 3),
            "latency_p90_s": round(_percentile(lat, 90), 3),
            "iterations": self.num_iterations,
        }


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    position = (len(sorted_values) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


# ---------------------------------------------------------------- iterserve


def _params(requests: Sequence[Request]) -> list[SamplingParams]:
    return [SamplingParams(max_tokens=r.max_tokens, temperature=0.0, ignore_eos=True)
            for r in requests]


def _make_llm(model_dir: Path, policy: str, args: argparse.Namespace,
              requests: Sequence[Request]) -> LLM:
    block_size = 16
    needed = sum(-(-(len(r.prompt_token_ids) + r.max_tokens) // block_size) for r in requests)
    return LLM(model_dir, policy=policy, dtype=args.dtype, block_size=block_size,
               num_kv_blocks=args.num_kv_blocks or needed + 16, max_num_batched_tokens=args.max_num_batched_tokens,
               max_num_seqs=args.max_num_seqs)


def run_iterserve(model_dir: Path, policy: str, requests: Sequence[Request],
                  args: argparse.Namespace) -> SystemResult:
    llm = _make_llm(model_dir, policy, args, requests)
    llm.generate([r.prompt_token_ids for r in requests[:2]],
                 SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))  # warm-up
    finish_times: list[float] = []
    num_steps = 0
    began = time.perf_counter()

    def on_step(num_finished: int, num_total: int) -> None:
        nonlocal num_steps
        num_steps += 1
        now = time.perf_counter() - began
        finish_times.extend([now] * (num_finished - len(finish_times)))

    outputs = llm.generate([r.prompt_token_ids for r in requests], _params(requests), on_step)
    elapsed = time.perf_counter() - began
    assert all(len(o.token_ids) == r.max_tokens for o, r in zip(outputs, requests, strict=True))
    return SystemResult(f"iterserve {policy}", elapsed, sum(r.max_tokens for r in requests),
                        tuple(finish_times), num_steps, tuple(o.token_ids for o in outputs))


# ------------------------------------------------------------- transformers


def run_static_hf(model_dir: Path, requests: Sequence[Request], batch_size: int,
                  dtype: torch.dtype) -> SystemResult:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval()
    pad_id = model.generation_config.pad_token_id
    if pad_id is None:
        eos = model.generation_config.eos_token_id
        pad_id = eos[0] if isinstance(eos, list) else eos
    _hf_batch(model, requests[:2], pad_id, max_new_tokens=4)  # warm-up
    latencies: list[float] = []
    outputs: list[tuple[int, ...]] = []
    num_steps = 0
    began = time.perf_counter()
    for first in range(0, len(requests), batch_size):
        batch = requests[first: first + batch_size]
        max_new = max(r.max_tokens for r in batch)
        generated = _hf_batch(model, batch, pad_id, max_new)
        now = time.perf_counter() - began
        latencies.extend([now] * len(batch))
        outputs.extend(tuple(row[: r.max_tokens]) for row, r in zip(generated, batch, strict=True))
        num_steps += max_new
    elapsed = time.perf_counter() - began
    return SystemResult(f"transformers static (batch {batch_size})", elapsed,
                        sum(r.max_tokens for r in requests), tuple(latencies), num_steps,
                        tuple(outputs))


def _hf_batch(model, batch: Sequence[Request], pad_id: int, max_new_tokens: int) -> list[list[int]]:
    """Left-padded greedy generate; returns the new tokens of every row."""
    width = max(len(r.prompt_token_ids) for r in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, request in enumerate(batch):
        n = len(request.prompt_token_ids)
        input_ids[row, width - n:] = torch.tensor(request.prompt_token_ids)
        attention_mask[row, width - n:] = 1
    with torch.inference_mode():
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask,
                             max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=pad_id)
    new = out[:, width:]
    assert new.shape[1] == max_new_tokens, "generate stopped early"
    return new.tolist()


# ------------------------------------------------------------------ report


def agreement(result: SystemResult, reference: SystemResult) -> tuple[int, float]:
    """(requests with identical outputs, mean fraction of the output that agrees
    before the first differing token) against the transformers reference."""
    identical, fractions = 0, []
    for got, want in zip(result.outputs, reference.outputs, strict=True):
        common = next((i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), len(want))
        identical += got == want
        fractions.append(common / len(want))
    return identical, statistics.fmean(fractions)


def markdown_table(results: Sequence[SystemResult], baseline: SystemResult) -> str:
    lines = [
        "| system | output tok/s | vs static | mean latency s | p50 s | p90 s | wall s | "
        "iterations | identical to HF |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        s = result.summary()
        identical, _ = agreement(result, baseline)
        lines.append(
            f"| {result.name} | {s['output_tokens_per_s']:.1f} | "
            f"{result.output_tokens_per_s / baseline.output_tokens_per_s:.2f}x | "
            f"{s['latency_mean_s']:.2f} | {s['latency_p50_s']:.2f} | {s['latency_p90_s']:.2f} | "
            f"{s['elapsed_s']:.1f} | {s['iterations']} | {identical}/{len(result.outputs)} |"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------- profile

_BUCKETS: list[tuple[str, Callable[[tuple[str, int, str]], bool]]] = [
    ("engine step (all)", lambda k: k[2] == "step" and k[0].endswith("engine/loop.py")),
    ("  policy.choose", lambda k: k[2] == "choose" and "/policies/" in k[0]),
    ("  validate_state/plan/result", lambda k: k[2] in {"validate_state", "validate_plan",
                                                         "validate_result"}),
    ("  advance (state transition)", lambda k: k[2] == "advance" and "transition" in k[0]),
    ("  TorchExecutor.execute", lambda k: k[2] == "execute" and k[0].endswith("model/executor.py")),
    ("    pack (PackedBatch)", lambda k: k[2] == "pack" and k[0].endswith("packing.py")),
    ("    model.forward", lambda k: k[2] == "forward" and k[0].endswith("llama.py")),
    ("      F.linear (matmul)", lambda k: "_nn.linear" in k[2]),
    ("      attention metadata build", lambda k: k[2] == "build" and "attention" in k[0]),
    ("      paged_attention (all)", lambda k: k[2] == "paged_attention"),
    ("        _gather_rows (KV gather)", lambda k: k[2] == "_gather_rows"),
    ("        SDPA kernel", lambda k: "scaled_dot_product_attention" in k[2]),
    ("      cache.write (K/V scatter)", lambda k: k[2] == "write" and "kv_cache" in k[0]),
    ("    sample", lambda k: k[2] in {"sample", "sample_ids", "sample_batch"}
     and k[0].endswith("sampling.py")),
    ("    _emit (stop + detokenize)", lambda k: k[2] == "_emit"),
    ("    kv apply_intents/prepare/commit",
     lambda k: k[2] in {"apply_intents", "prepare", "commit"} and "kv_residency" in k[0]),
]


def profile_iterserve(model_dir: Path, policy: str, requests: Sequence[Request],
                      args: argparse.Namespace) -> str:
    """cProfile ``args.profile_steps`` iterations of ``LLM.generate`` after
    ``args.profile_skip`` iterations, and bucket the cumulative time."""
    llm = _make_llm(model_dir, policy, args, requests)
    llm.generate([r.prompt_token_ids for r in requests[:2]],
                 SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
    profiler = cProfile.Profile()
    step = 0
    rows_before = 0
    window_began = 0.0

    class _Stop(Exception):
        pass

    def on_step(num_finished: int, num_total: int) -> None:
        nonlocal step, rows_before, window_began
        step += 1
        if step == args.profile_skip:
            rows_before = llm.executor.num_computed_rows
            window_began = time.perf_counter()
            profiler.enable()
        elif step == args.profile_skip + args.profile_steps:
            profiler.disable()
            raise _Stop

    with contextlib.suppress(_Stop):
        llm.generate([r.prompt_token_ids for r in requests], _params(requests), on_step)
    window_s = time.perf_counter() - window_began
    num_rows = llm.executor.num_computed_rows - rows_before
    stats = pstats.Stats(profiler)
    report = [f"profile: iterserve {policy}, iterations {args.profile_skip}.."
              f"{args.profile_skip + args.profile_steps}, {num_rows} rows computed "
              f"({num_rows / args.profile_steps:.1f}/iteration), wall {window_s:.2f} s "
              "under cProfile",
              "| bucket | ms / iteration | share of engine step |", "|---|---:|---:|"]
    totals = {name: 0.0 for name, _ in _BUCKETS}
    for key, (_, _, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        for name, match in _BUCKETS:
            if match(key):
                builtin = key[0] == "~"
                totals[name] += tottime if builtin else cumtime
    step_total = totals["engine step (all)"] or 1.0
    for name, _ in _BUCKETS:
        report.append(f"| {name} | {1000 * totals[name] / args.profile_steps:.2f} | "
                      f"{100 * totals[name] / step_total:.0f}% |")
    if args.profile_out:
        stats.dump_stats(args.profile_out)
    return "\n".join(report)


# --------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, default=None,
                        help="checkpoint to use (default: the preset, built in --cache-dir)")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--num-requests", type=int, default=None, help="64 (16 with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=16, help="static batch size")
    parser.add_argument("--policies", nargs="+", default=["vllm", "sarathi-serve"])
    parser.add_argument("--max-num-batched-tokens", type=int, default=512)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--num-kv-blocks", "--kv-blocks", dest="num_kv_blocks", type=int, default=None,
                        help="default: enough 16-row blocks for the whole workload")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 16 requests, prompts 16..64, outputs 8..32")
    parser.add_argument("--skip-hf", action="store_true", help="iterserve only (no ratios)")
    parser.add_argument("--json", type=Path, default=None, help="write results here")
    parser.add_argument("--profile-steps", type=int, default=0,
                        help="instead of the benchmark: cProfile this many iterations")
    parser.add_argument("--profile-skip", type=int, default=20,
                        help="iterations to run before profiling starts")
    parser.add_argument("--profile-out", type=Path, default=None, help="pstats dump file")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.quick:
        workload = Workload(args.num_requests or 16, (16, 64), (8, 32), args.seed)
    else:
        workload = Workload(args.num_requests or 64, (32, 256), (16, 256), args.seed)
    model_dir = args.model_dir or cached_model(args.cache_dir / f"{args.preset}-seed0", args.preset)
    vocab_size = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    requests = workload.requests(vocab_size)
    if args.profile_steps:
        print(profile_iterserve(model_dir, args.policies[0], requests, args))
        return 0
    results = []
    for policy in args.policies:
        results.append(run_iterserve(model_dir, policy, requests, args))
        print(results[-1].summary(), file=sys.stderr)
    baseline = None
    if not args.skip_hf:
        baseline = run_static_hf(model_dir, requests, args.batch_size, DTYPES[args.dtype])
        print(baseline.summary(), file=sys.stderr)
    command = " ".join([Path(sys.executable).name, *sys.argv])
    print(f"\n{workload.num_requests} requests, prompts {workload.prompt_lens}, outputs "
          f"{workload.output_lens}, seed {workload.seed}, {args.dtype}, {args.threads} threads, "
          f"model {model_dir.name}\n")
    if baseline is not None:
        print(markdown_table([*results, baseline], baseline))
    if args.json:
        record = {
            "command": command, "workload": asdict(workload), "dtype": args.dtype,
            "threads": args.threads, "model_dir": str(model_dir),
            "torch": torch.__version__,
            "results": [r.summary() for r in ([*results, baseline] if baseline else results)],
        }
        if baseline is not None:
            record["agreement_with_hf"] = {r.name: agreement(r, baseline) for r in results}
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
