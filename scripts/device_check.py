"""CUDA check of the real executor (run on a machine with a GPU):

    PYTHONPATH=src python3 scripts/device_check.py OUT_DIR

The same prompts through LLM.generate on CPU and CUDA (float32, greedy) must
give the same tokens; a PRESERVE_EXACT run with a tiny device pool (swaps to
the CPU host pool and back) must match the unconstrained CUDA run; then a
throughput figure for the small preset on CUDA (vllm policy, bf16).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

from iterserve.engine.loop import Engine
from iterserve.llm import LLM
from iterserve.model.executor import TorchExecutor
from iterserve.model.loader import load_model
from iterserve.model.make_model import make_model
from iterserve.model.tokenizer import load_tokenizer
from iterserve.policies.registry import make_policy
from iterserve.records.sampling_params import SamplingParams
from iterserve.records.spec import Capacity, KvSpec, OnlineWorkload, RequestSpec

PROMPTS = ["Continuous batching schedules one iteration at a time", "Hello", "The scheduler " * 9]


def greedy(device: str, model_dir: Path) -> list[tuple[int, ...]]:
    llm = LLM(model_dir, num_kv_blocks=256, block_size=16, device=device)
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    return [o.token_ids for o in llm.generate(PROMPTS, params)]


def preserved(model_dir: Path) -> tuple[list[tuple[int, ...]], dict[str, int]]:
    model = load_model(model_dir, device="cuda")
    tokenizer = load_tokenizer(model_dir)
    executor = TorchExecutor(model, 12, 4, tokenizer, num_host_blocks=64)
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    specs = []
    for i, prompt in enumerate(PROMPTS):
        ids = tokenizer.encode(prompt)
        executor.add_request(f"r{i}", ids, params, seed=i)
        specs.append(RequestSpec(f"r{i}", 0.0, len(ids), 24, prompt_token_ids=tuple(ids)))
    workload = OnlineWorkload("preserve", "ms", Capacity(64, 8), tuple(specs),
                              kv=KvSpec(12, 4, 64, preemption_mode="swap"))
    Engine(workload, make_policy("vllm"), executor).run()
    stats = executor.kv.stats()
    return ([tuple(executor.streams[s.request_id].output_token_ids) for s in specs],
            {"swapped_out_blocks": stats.num_swapped_out_blocks, **stats.intents})


def throughput(model_dir: Path) -> dict[str, float]:
    llm = LLM(model_dir, num_kv_blocks=4096, block_size=16, device="cuda", dtype="bfloat16",
              max_num_batched_tokens=2048, max_num_seqs=64)
    prompts = [[(7 * i + j) % 4000 + 5 for j in range(32 + (i * 37) % 224)] for i in range(64)]
    params = [SamplingParams(max_tokens=16 + (i * 53) % 240, temperature=0.0, ignore_eos=True)
              for i in range(64)]
    llm.generate(prompts[:4], params[:4])  # warm-up
    began = time.perf_counter()
    outs = llm.generate(prompts, params)
    elapsed = time.perf_counter() - began
    tokens = sum(len(o.token_ids) for o in outs)
    return {"output_tokens": tokens, "seconds": elapsed, "tokens_per_s": tokens / elapsed}


def main() -> None:
    out = Path(sys.argv[1])
    tiny = make_model(out / "tiny", "tiny", 0)
    report: dict[str, object] = {"torch": torch.__version__, "cuda": torch.cuda.get_device_name()}
    cpu, cuda = greedy("cpu", tiny), greedy("cuda", tiny)
    report["cpu_equals_cuda"] = cpu == cuda
    report["token_agreement"] = sum(
        a == b for x, y in zip(cpu, cuda, strict=True)  # one output per prompt
        for a, b in zip(x, y, strict=False)) / sum(len(x) for x in cpu)  # lengths may differ
    swapped, stats = preserved(tiny)
    report["preserve_equals_unconstrained_cuda"] = swapped == cuda
    report["preserve_stats"] = stats
    report["throughput_small_bf16_cuda"] = throughput(make_model(out / "small", "small", 0))
    print(json.dumps(report, indent=2))
    (out / "device_check.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
