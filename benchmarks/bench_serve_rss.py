"""Does a long-running ``iterserve serve`` keep its memory flat? (issue 37)

Starts ``iterserve serve`` on the built-in tiny model with its decision and
event logs streamed to files (rolled over by size), sends --num-requests
short completions (a few prompt tokens, --max-tokens output tokens, greedy,
``ignore_eos``) from --clients concurrent keep-alive clients, and prints the
server process's resident memory (VmRSS from /proc) after the first
--warmup requests and every --report-every requests after that. Memory is
flat when the RSS at the end is within --target-mb of the RSS after the
warm-up (the issue's target: 50 MB between 2,000 and 50,000 requests); the
script exits 1 when it is not, or when any request fails.

    .venv/bin/python benchmarks/bench_serve_rss.py                       # 50,000 requests
    .venv/bin/python benchmarks/bench_serve_rss.py --num-requests 3000 --report-every 500

Linux only (reads /proc). The full run takes tens of minutes on a 2-core
machine; run it on an idle one. ``--no-logs`` serves without the logs;
``--replay`` replays the decision log afterwards (its segments joined, oldest
first: keep --log-backups large enough that none is deleted).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-requests", type=int, default=50_000)
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients")
    parser.add_argument("--warmup", type=int, default=2_000,
                        help="requests before the baseline RSS sample")
    parser.add_argument("--report-every", type=int, default=5_000)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--target-mb", type=float, default=50.0,
                        help="allowed RSS growth after the warm-up")
    parser.add_argument("--log-max-bytes", type=int, default=64 * 1024 * 1024)
    parser.add_argument("--log-backups", type=int, default=1000)
    parser.add_argument("--no-logs", action="store_true", help="serve without the logs")
    parser.add_argument("--replay", action="store_true",
                        help="replay the decision log after the run")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="where the logs and the server's output go (default: a "
                             "temporary directory, removed after a clean run)")
    parser.add_argument("--ready-timeout-s", type=float, default=600.0)
    args = parser.parse_args(argv)
    for name in ("num_requests", "clients", "warmup", "report_every", "max_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup > args.num_requests:
        parser.error("--warmup must be <= --num-requests")
    return args


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mb(pid: int) -> float:
    """The process's resident set (VmRSS), in MB (10^6 bytes)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError(f"no VmRSS for process {pid}")


def serve_argv(args: argparse.Namespace, port: int, log_dir: Path) -> list[str]:
    argv = [sys.executable, "-m", "iterserve.cli.main", "serve", "--port", str(port),
            "--served-model-name", "tiny", "--num-kv-blocks", "256", "--log-level", "warning",
            "--stats-interval-s", "0", "--drain-timeout", "30"]
    if not args.no_logs:
        argv += ["--decision-log", str(log_dir / "decisions.jsonl"),
                 "--event-log", str(log_dir / "events.jsonl"),
                 "--log-max-bytes", str(args.log_max_bytes),
                 "--log-backups", str(args.log_backups)]
    return argv


def wait_ready(base_url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(base_url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the server did not come up")


@dataclass
class Progress:
    """Requests answered so far, shared by the client threads."""

    total: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    num_sent: int = 0
    num_done: int = 0
    failures: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def claim(self) -> int | None:
        with self.lock:
            if self.num_sent >= self.total or self.failures:
                return None
            self.num_sent += 1
            return self.num_sent

    def finish(self, failure: str | None) -> int:
        with self.lock:
            self.num_done += 1
            if failure is not None:
                self.failures.append(failure)
            if self.num_done >= self.total or self.failures:
                self.done.set()
            return self.num_done


def client(base_url: str, progress: Progress, max_tokens: int,
           on_done: Callable[[int], None]) -> None:
    with httpx.Client(base_url=base_url, timeout=60) as http:
        while (index := progress.claim()) is not None:
            body = {"model": "tiny", "prompt": f"hi {index % 97}", "max_tokens": max_tokens,
                    "temperature": 0.0, "ignore_eos": True}
            failure = None
            try:
                response = http.post("/v1/completions", json=body)
                if response.status_code != 200:
                    failure = f"request {index}: HTTP {response.status_code}: {response.text}"
            except httpx.HTTPError as exc:
                failure = f"request {index}: {type(exc).__name__}: {exc}"
            on_done(progress.finish(failure))


class RssProbe:
    """Samples the server's RSS as the answered count crosses each mark."""

    def __init__(self, pid: int, marks: list[int]) -> None:
        self.pid = pid
        self.marks = marks
        self.samples: list[tuple[int, float, float]] = []  # (requests, rss MB, elapsed s)
        self._next = 0
        self._lock = threading.Lock()
        self._start = time.monotonic()

    def on_done(self, num_done: int) -> None:
        with self._lock:
            while self._next < len(self.marks) and num_done >= self.marks[self._next]:
                sample = (self.marks[self._next], rss_mb(self.pid),
                          time.monotonic() - self._start)
                self.samples.append(sample)
                print(f"{sample[0]:>8,} requests  RSS {sample[1]:8.1f} MB  "
                      f"{sample[2]:7.1f} s", flush=True)
                self._next += 1


def marks(args: argparse.Namespace) -> list[int]:
    every = range(args.report_every, args.num_requests + 1, args.report_every)
    return sorted({args.warmup, *every, args.num_requests})


def run(args: argparse.Namespace, log_dir: Path) -> int:
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    with open(log_dir / "server.out", "w") as out:
        proc = subprocess.Popen(serve_argv(args, port, log_dir), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            wait_ready(base_url, proc, args.ready_timeout_s)
            print(f"server up: RSS {rss_mb(proc.pid):.1f} MB before any request", flush=True)
            probe = RssProbe(proc.pid, marks(args))
            progress = Progress(args.num_requests)
            threads = [threading.Thread(target=client, args=(base_url, progress,
                                                             args.max_tokens, probe.on_done))
                       for _ in range(args.clients)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            proc.send_signal(signal.SIGTERM)
            status = proc.wait(timeout=120)
    if progress.failures:
        print(f"FAILED: {progress.failures[0]}", file=sys.stderr)
        return 1
    if status != 0:
        print(f"FAILED: the server exited with {status}", file=sys.stderr)
        return 1
    return report(args, probe.samples, log_dir)


def report(args: argparse.Namespace, samples: list[tuple[int, float, float]],
           log_dir: Path) -> int:
    base = next(rss for num, rss, _ in samples if num == args.warmup)
    final_num, final, elapsed = samples[-1]
    growth = final - base
    print(f"\nRSS after {args.warmup:,} requests {base:.1f} MB, after {final_num:,} "
          f"{final:.1f} MB: {growth:+.1f} MB (target: within {args.target_mb:.0f} MB); "
          f"{final_num / elapsed:.0f} requests/s")
    if not args.no_logs:
        for path in sorted(log_dir.glob("*.jsonl*")):
            print(f"  {path.name}: {path.stat().st_size / 1e6:.1f} MB")
    if args.replay and not args.no_logs:
        replay_log(log_dir)
    return 0 if abs(growth) <= args.target_mb else 1


def replay_log(log_dir: Path) -> None:
    """The decision log's segments joined oldest first, then replayed."""
    from iterserve.sim.replay import replay

    segments = sorted(log_dir.glob("decisions.jsonl.*"), key=lambda p: -int(p.suffix[1:]))
    joined = log_dir / "decisions.joined.jsonl"
    with open(joined, "wb") as out:
        for path in [*segments, log_dir / "decisions.jsonl"]:
            out.write(path.read_bytes())
    report = replay(joined)
    print(f"replayed {report.num_iterations:,} iterations bit for bit")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not sys.platform.startswith("linux"):
        print("bench_serve_rss.py reads /proc: Linux only", file=sys.stderr)
        return 2
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="iterserve-rss-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    status = run(args, log_dir)
    if args.log_dir is None and status == 0:
        shutil.rmtree(log_dir)
    elif status != 0:
        print(f"logs kept in {log_dir}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
