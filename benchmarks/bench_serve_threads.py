"""Where `iterserve serve`'s CPU goes by thread under concurrent streams (issue 12).

Starts `iterserve serve` on a checkpoint, sends one warm-up request, then
--streams concurrent streaming completions (random token-id prompts of
--prompt-len tokens, --output-len tokens each, greedy, ignore_eos) and reads
each server thread's CPU seconds from /proc (Linux) before and after. It
prints the server's CPU per thread with its share: the engine thread (the
step loop and torch's calling thread), torch's intra-op helper, and the main
thread (uvicorn's event loop: HTTP, SSE encoding and writes). The main
thread is the one whose id is the server's pid. Shares, not wall figures,
are what a shared machine leaves meaningful.

    .venv/bin/python benchmarks/bench_serve_threads.py /work/scratch/models/small
    PYTHONPATH=/tmp/other/src .venv/bin/python benchmarks/bench_serve_threads.py MODEL  # another tree
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

FIRST_PLAIN_TOKEN = 4


def thread_cpu_s(pid: int) -> dict[int, float]:
    """Thread id -> user + system CPU seconds."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return out


async def stream_one(client: httpx.AsyncClient, url: str, prompt: list[int],
                     max_tokens: int) -> int:
    body = {"model": "bench", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
            "temperature": 0.0, "stream": True}
    num_chunks = 0
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        async for line in response.aiter_lines():
            num_chunks += line.startswith("data: ") and line != "data: [DONE]"
    return num_chunks


async def load(args: argparse.Namespace, url: str, pid: int) -> None:
    rng = random.Random(args.seed)
    prompts = [[rng.randrange(FIRST_PLAIN_TOKEN, args.vocab_size) for _ in range(args.prompt_len)]
               for _ in range(args.streams + 1)]
    async with httpx.AsyncClient(timeout=600, trust_env=False) as client:
        await stream_one(client, url, prompts[0], 4)
        before, began = thread_cpu_s(pid), time.perf_counter()
        chunks = await asyncio.gather(*(stream_one(client, url, p, args.output_len)
                                        for p in prompts[1:]))
        wall_s, after = time.perf_counter() - began, thread_cpu_s(pid)
    spent = {tid: after[tid] - before.get(tid, 0.0) for tid in after}
    total_s = sum(spent.values())
    print(f"{args.streams} streams, {sum(chunks)} chunks, {wall_s:.1f} s wall, "
          f"server CPU {total_s:.2f} s")
    for tid, cpu_s in sorted(spent.items(), key=lambda item: -item[1]):
        if cpu_s > 0:
            role = "main (event loop)" if tid == pid else "other"
            print(f"  thread {tid:<8} {role:<18} {cpu_s:7.2f} s {100 * cpu_s / total_s:5.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=8731)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    iterserve = Path(sys.executable).with_name("iterserve")
    server = subprocess.Popen(
        [str(iterserve), "serve", str(args.model), "--served-model-name", "bench",
         "--port", str(args.port), "--dtype", args.dtype, "--max-num-batched-tokens", "512",
         "--max-num-seqs", "64"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{args.port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/v1/models", trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        asyncio.run(load(args, url, server.pid))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)


if __name__ == "__main__":
    main()
