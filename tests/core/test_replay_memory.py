"""Replay holds what is live, not the log (DESIGN rule 8): replaying a run
eight times as long, with the same arrival rate and so about the same live
set, peaks at about the same traced memory, plain or zstd-compressed.

What the longer replay may add is its header's workload (a few hundred
bytes a request) and the caches a first use fills, which move the peak by
about 100 KB with the tests run before; the log's text grows by 3.7 MB
here. Reading every line up front (as replay once did) holds at least
that text, so the peak and its growth are compared with the text."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
import zstandard

from iterserve.cli.main import main
from iterserve.sim.replay import replay

NUM_REQUESTS = 60
LENGTH_FACTOR = 8


def _spec(num_requests: int) -> dict:
    return {"workload_id": f"replay-memory-{num_requests}", "seed": 5,
            "num_requests": num_requests, "clock": "ms",
            "capacity": {"max_num_batched_tokens": 256, "max_num_seqs": 8},
            "kv": {"num_kv_blocks": 64, "block_size": 16},
            "arrival": {"process": "poisson", "rate_per_s": 20},
            "clients": [{"client_id": "c0",
                         "prompt_tokens": {"kind": "uniform", "min": 8, "max": 64},
                         "output_tokens": {"kind": "uniform", "min": 2, "max": 16}}]}


def _simulated_log(out: Path, num_requests: int, name: str) -> Path:
    out.mkdir()
    spec, workload, log = out / "spec.json", out / "workload.json", out / name
    spec.write_text(json.dumps(_spec(num_requests)))
    assert main(["workload", "gen", str(spec), "-o", str(workload)]) == 0
    assert main(["simulate", "--no-plots", "--policy", "vllm", "--workload", str(workload),
                 "--out", str(out / "report"), "--decision-log", str(log)]) == 0
    return log


def _text_bytes(log: Path) -> int:
    if log.suffix != ".zst":
        return log.stat().st_size
    with log.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as text:
        return len(text.read())


def _replay_peak_bytes(log: Path) -> int:
    tracemalloc.start()
    try:
        replay(log)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("name", ["log.jsonl", "log.jsonl.zst"])
def test_replay_memory_does_not_grow_with_the_log(tmp_path, name) -> None:
    short = _simulated_log(tmp_path / "short", NUM_REQUESTS, name)
    long = _simulated_log(tmp_path / "long", LENGTH_FACTOR * NUM_REQUESTS, name)
    assert long.stat().st_size > 7 * short.stat().st_size  # the log is what differs
    replay(short)  # first use imports and fills caches, which a test run before may have paid
    short_peak, long_peak = _replay_peak_bytes(short), _replay_peak_bytes(long)
    text_growth = _text_bytes(long) - _text_bytes(short)
    assert long_peak - short_peak < 0.5 * text_growth, (short_peak, long_peak, text_growth)
    assert long_peak < 0.5 * _text_bytes(long), (long_peak, _text_bytes(long))
