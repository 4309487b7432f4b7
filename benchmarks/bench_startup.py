"""Start-up of `LLM(...)` on a preset and first-token latency of one request on
an idle engine, each repeat in a fresh process; prints the medians.

Per repeat a child process measures, with `time.perf_counter`:

- import: `from iterserve import LLM, SamplingParams` (torch comes in here);
- LLM(...): the constructor (config, tokenizer, weights, KV pool, engine thread);
- start-up: import + LLM(...), what a user waits for before the first request;
- first token: `generate` of one 64-token prompt with max_tokens=1, greedy,
  on the idle engine (the whole call: submit, prefill, sample, return).

The checkpoint is built once into ~/.cache/iterserve/<preset>-seed0 (as
bench_vs_vllm.py does). Run it on an idle machine; on a shared one every
figure is inflated.

    .venv/bin/python benchmarks/bench_startup.py --preset small --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

PROMPT_TOKENS = 64
FIRST_PLAIN_TOKEN = 4  # ids below are make_model's special tokens


def child(model_dir: str, dtype: str) -> None:
    """One measurement; prints a JSON line of seconds."""
    began = time.perf_counter()
    from iterserve import LLM, SamplingParams

    imported = time.perf_counter()
    llm = LLM(model_dir, dtype=dtype)
    ready = time.perf_counter()
    prompt = [FIRST_PLAIN_TOKEN + i % 100 for i in range(PROMPT_TOKENS)]
    llm.generate([prompt], SamplingParams(max_tokens=1, temperature=0.0))
    first = time.perf_counter()
    llm.close()
    print(json.dumps({"import_s": imported - began, "llm_s": ready - imported,
                      "startup_s": ready - began, "first_token_s": first - ready}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.dtype)
        return
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    from iterserve.model.cache_dir import cache_root
    from iterserve.model.make_model import cached_model

    model_dir = cached_model(cache_root() / f"{args.preset}-seed0", args.preset)
    runs = []
    for _ in range(args.repeats):
        out = subprocess.run([sys.executable, __file__, "--child", str(model_dir),
                              "--dtype", args.dtype], capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"preset {args.preset} {args.dtype}, {args.repeats} fresh processes, medians:")
    for key, label in (("import_s", "import iterserve"), ("llm_s", "LLM(...)"),
                       ("startup_s", "start-up (import + LLM)"),
                       ("first_token_s", f"first token ({PROMPT_TOKENS}-token prompt)")):
        values = [run[key] for run in runs]
        print(f"  {label:34s} {statistics.median(values) * 1e3:8.0f} ms "
              f"(min {min(values) * 1e3:.0f}, max {max(values) * 1e3:.0f})")


if __name__ == "__main__":
    main()
