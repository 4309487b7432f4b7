"""The CUDA check of the real executor, as one run (under 8 minutes on one H200):

    PYTHONPATH=src python3 scripts/device_check.py OUT_DIR
    PYTHONPATH=src python3 scripts/device_check.py --dry-run OUT_DIR   # CPU, tiny sizes

Sections, each recorded (or its error recorded) in OUT_DIR/device_check.json
and summarised in OUT_DIR/device_check.md as soon as it ends:

1. correctness: the batched attention path (one FlexAttention call per layer,
   decode graphs) against the per-request reference path on the same device:
   fp32 greedy tokens must be identical (tiny preset); bf16 (small preset):
   first tokens and the token agreement rate;
2. attention: one layer's attention alone on synthetic decode and mixed
   batches: the per-request path, FlexAttention and varlen flash attention
   (ms per call, largest difference from the reference): the measurement
   that chooses the CUDA default;
3. legacy (CUDA only): CPU vs CUDA greedy tokens, a PRESERVE_EXACT run with a
   tiny device pool against the unconstrained run, the small preset's bf16
   throughput;
4. workload: a random Llama of hidden 2048, 16 layers, GQA 32/8 (about 737M
   parameters with a tied 32000-token vocabulary), 256 requests, prompts
   128..512, 128 output tokens each, greedy, ignore_eos: iterserve (batched
   path, with step timings: p50 of the steps with every request decoding),
   transformers static batching (batches of 64) and transformers'
   `generate_batch` (its continuous batching);
5. profile: a torch-profiler summary of a short iterserve run (kernel
   launches, attention calls, the top kernels by device time).

`--dry-run` runs every section's code on the CPU at tiny sizes (legacy is
skipped), so the script is tested without a GPU (tests/model/test_device_check.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from iterserve.engine.loop import Engine
from iterserve.llm import LLM
from iterserve.model.executor import TorchExecutor
from iterserve.model.loader import load_model
from iterserve.model.make_model import llama_config_json, make_model, random_llama_weights
from iterserve.model.presets import ModelPreset
from iterserve.model.tokenizer import load_tokenizer
from iterserve.policies.registry import make_policy
from iterserve.records.sampling_params import SamplingParams
from iterserve.records.spec import Capacity, KvSpec, OnlineWorkload, RequestSpec

PROMPTS = ["Continuous batching schedules one iteration at a time", "Hello", "The scheduler " * 9]
BENCH_MODEL = ModelPreset(name="bench-730m", num_layers=16, hidden_size=2048, num_heads=32,
                          num_kv_heads=8, intermediate_size=5120, max_vocab_size=32000,
                          tie_word_embeddings=True)
BENCH_VOCAB_SIZE = 32000
#: A first (compiling, capturing) iterserve pass slower than this is reported
#: as it is, without the warm second pass, to stay within the run's budget.
MAX_COLD_PASS_S = 150.0


@dataclass(frozen=True)
class Scale:
    """Sizes of one run (the full one on a GPU, a tiny one for --dry-run)."""

    device: str
    bench_model: ModelPreset | None  # None: the tiny preset
    vocab_size: int
    num_requests: int
    min_prompt: int
    max_prompt: int
    num_output: int
    static_batch: int
    max_num_batched_tokens: int
    profile_requests: int
    profile_output: int


FULL = Scale("cuda", BENCH_MODEL, BENCH_VOCAB_SIZE, 256, 128, 512, 128, 64, 8192, 64, 16)
DRY = Scale("cpu", None, 0, 6, 8, 24, 6, 4, 64, 3, 3)


def greedy_params(max_tokens: int) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)


def generate_tokens(model_dir: Path, device: str, dtype: str, backend: str,
                    prompts: list[Any], max_tokens: int,
                    graph_stats: dict[str, Any] | None = None) -> list[tuple[int, ...]]:
    """Greedy outputs; `graph_stats` (when given) gets the decode graphs' counts."""
    llm = LLM(model_dir, num_kv_blocks=256, block_size=16, device=device, dtype=dtype,
              attention_backend=backend)
    try:
        tokens = [o.token_ids for o in llm.generate(prompts, greedy_params(max_tokens))]
        graphs = llm.executor.decode_graphs
        if graph_stats is not None and graphs is not None:
            graph_stats.update(replays=graphs.num_replays, shapes=len(graphs.shapes),
                               eager_fallbacks=graphs.num_eager_fallbacks,
                               failure=graphs.failure)
        return tokens
    finally:
        llm.close()


def agreement(reference: list[tuple[int, ...]], other: list[tuple[int, ...]]) -> dict[str, Any]:
    """Identical?, first tokens equal?, and the share of positions that agree
    up to each sequence's first difference counted position by position."""
    same = sum(a == b for x, y in zip(reference, other, strict=True)
               for a, b in zip(x, y, strict=False))
    return {"identical": reference == other,
            "first_tokens_equal": [x[:1] for x in reference] == [y[:1] for y in other],
            "token_agreement": same / max(1, sum(len(x) for x in reference))}


def correctness(out: Path, scale: Scale) -> dict[str, Any]:
    tiny = make_model(out / "tiny", "tiny", 0)
    report: dict[str, Any] = {"flex_decode_graphs": {}}
    fp32 = {backend: generate_tokens(tiny, scale.device, "float32", backend, PROMPTS, 24,
                                     report["flex_decode_graphs"] if backend == "flex" else None)
            for backend in ("flex", "torch")}
    report["fp32_tiny"] = agreement(fp32["torch"], fp32["flex"])
    small = tiny if scale.bench_model is None else make_model(out / "small", "small", 0)
    bf16 = {backend: generate_tokens(small, scale.device, "bfloat16", backend, PROMPTS, 24)
            for backend in ("flex", "torch")}
    report["bf16_small" if small != tiny else "bf16_tiny"] = agreement(bf16["torch"],
                                                                       bf16["flex"])
    return report


def legacy(out: Path) -> dict[str, Any]:
    """The checks this script ran before the batched path (CUDA only)."""
    tiny = make_model(out / "tiny", "tiny", 0)
    cpu = generate_tokens(tiny, "cpu", "float32", "auto", PROMPTS, 24)
    cuda = generate_tokens(tiny, "cuda", "float32", "auto", PROMPTS, 24)
    swapped, stats = preserved(tiny)
    return {"cpu_vs_cuda": agreement(cpu, cuda),
            "preserve_equals_unconstrained_cuda": swapped == cuda, "preserve_stats": stats,
            "throughput_small_bf16_cuda": small_throughput(make_model(out / "small", "small", 0))}


def preserved(model_dir: Path) -> tuple[list[tuple[int, ...]], dict[str, int]]:
    model = load_model(model_dir, device="cuda")
    tokenizer = load_tokenizer(model_dir)
    executor = TorchExecutor(model, 12, 4, tokenizer, num_host_blocks=64)
    specs = []
    for i, prompt in enumerate(PROMPTS):
        ids = tokenizer.encode(prompt)
        executor.add_request(f"r{i}", ids, greedy_params(24), seed=i)
        specs.append(RequestSpec(f"r{i}", 0.0, len(ids), 24, prompt_token_ids=tuple(ids)))
    workload = OnlineWorkload("preserve", "ms", Capacity(64, 8), tuple(specs),
                              kv=KvSpec(12, 4, 64, preemption_mode="swap"))
    Engine(workload, make_policy("vllm"), executor).run()
    stats = executor.kv.stats()
    return ([tuple(executor.streams[s.request_id].output_token_ids) for s in specs],
            {"swapped_out_blocks": stats.num_swapped_out_blocks, **stats.intents})


def small_throughput(model_dir: Path) -> dict[str, float]:
    llm = LLM(model_dir, num_kv_blocks=4096, block_size=16, device="cuda", dtype="bfloat16",
              max_num_batched_tokens=2048, max_num_seqs=64)
    prompts = [[(7 * i + j) % 4000 + 5 for j in range(32 + (i * 37) % 224)] for i in range(64)]
    params = [greedy_params(16 + (i * 53) % 240) for i in range(64)]
    try:
        llm.generate(prompts[:4], params[:4])  # warm-up
        began = time.perf_counter()
        outs = llm.generate(prompts, params)
        elapsed = time.perf_counter() - began
    finally:
        llm.close()
    tokens = sum(len(o.token_ids) for o in outs)
    return {"output_tokens": tokens, "seconds": elapsed, "tokens_per_s": tokens / elapsed}


def bench_model_dir(out: Path, scale: Scale) -> Path:
    """The workload's checkpoint: the tiny preset (dry run), else the 730M
    shape with a 32000-token vocabulary (the tokenizer files are the small
    preset's; the workload sends token ids)."""
    if scale.bench_model is None:
        return make_model(out / "tiny", "tiny", 0)
    model_dir = make_model(out / "bench-730m", "tiny", 0)
    config = json.loads((model_dir / "config.json").read_text())
    spec = scale.bench_model
    fresh = llama_config_json(spec, scale.vocab_size, config["bos_token_id"],
                              config["eos_token_id"])
    (model_dir / "config.json").write_text(json.dumps(fresh, indent=2))
    weights = {name: tensor.to(torch.bfloat16)
               for name, tensor in random_llama_weights(spec, scale.vocab_size, 0).items()}
    save_file(weights, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    return model_dir


def workload_prompts(scale: Scale, vocab_size: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(10, vocab_size) for _ in range(rng.randint(scale.min_prompt,
                                                                      scale.max_prompt))]
            for _ in range(scale.num_requests)]


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def iterserve_llm(model_dir: Path, scale: Scale, backend: str, num_prompts: int) -> LLM:
    num_blocks = num_prompts * -(-(scale.max_prompt + scale.num_output) // 16) + 64
    dtype = "bfloat16" if scale.device == "cuda" else "float32"
    return LLM(model_dir, num_kv_blocks=num_blocks, block_size=16, device=scale.device,
               dtype=dtype, attention_backend=backend, max_num_seqs=scale.num_requests,
               max_num_batched_tokens=scale.max_num_batched_tokens)


def run_iterserve(model_dir: Path, prompts: list[list[int]], scale: Scale,
                  backend: str) -> dict[str, Any]:
    """One warm-up pass of the workload (compiles, captures), one measured
    (unless the first took longer than MAX_COLD_PASS_S)."""
    llm = iterserve_llm(model_dir, scale, backend, len(prompts))
    steps: list[dict[str, float]] = []
    execute = llm.executor.execute

    def timed(plan: Any, state: Any) -> Any:
        began = time.perf_counter()
        result = execute(plan, state)
        steps.append({"ms": (time.perf_counter() - began) * 1e3, "num_work": len(plan.work),
                      "num_rows": sum(w.end - w.start for w in plan.work)})
        return result

    llm.executor.execute = timed  # type: ignore[method-assign]
    try:
        began = time.perf_counter()
        outs = llm.generate(prompts, greedy_params(scale.num_output))
        synchronize(scale.device)
        elapsed = time.perf_counter() - began
        is_warm = elapsed < MAX_COLD_PASS_S  # else no time for a second pass: report this one
        if is_warm:
            steps.clear()
            began = time.perf_counter()
            outs = llm.generate(prompts, greedy_params(scale.num_output))
            synchronize(scale.device)
            elapsed = time.perf_counter() - began
        graphs = llm.executor.decode_graphs
    finally:
        llm.close()
    tokens = sum(len(o.token_ids) for o in outs)
    full = [s["ms"] for s in steps if s["num_work"] == len(prompts) == s["num_rows"]]
    every = [s["ms"] for s in steps]
    return {"backend": backend, "warm": is_warm, "output_tokens": tokens, "seconds": elapsed,
            "tokens_per_s": tokens / elapsed, "num_steps": len(steps),
            "step_ms_p50": statistics.median(every) if every else None,
            "decode_steps_all_live": len(full),
            "decode_step_ms_p50_all_live": statistics.median(full) if full else None,
            "graph_shapes": [] if graphs is None else [dataclasses.astuple(s)
                                                       for s in graphs.shapes],
            "graph_replays": None if graphs is None else graphs.num_replays,
            "graph_failure": None if graphs is None else graphs.failure}


def run_static(model_dir: Path, prompts: list[list[int]], scale: Scale) -> dict[str, Any]:
    """transformers generate over fixed batches, left-padded, every request
    forced to its full output length."""
    model = hf_model(model_dir, scale)

    def one_pass() -> int:
        count = 0
        for first in range(0, len(prompts), scale.static_batch):
            batch = prompts[first: first + scale.static_batch]
            width = max(map(len, batch))
            ids = torch.zeros(len(batch), width, dtype=torch.long)
            mask = torch.zeros(len(batch), width, dtype=torch.long)
            for row, prompt in enumerate(batch):
                ids[row, width - len(prompt):] = torch.tensor(prompt)
                mask[row, width - len(prompt):] = 1
            with torch.inference_mode():
                out = model.generate(input_ids=ids.to(scale.device),
                                     attention_mask=mask.to(scale.device),
                                     max_new_tokens=scale.num_output,
                                     min_new_tokens=scale.num_output, do_sample=False,
                                     pad_token_id=0)
            count += (out.shape[1] - width) * len(batch)
        return count

    one_pass_small(model, scale)
    synchronize(scale.device)
    began = time.perf_counter()
    tokens = one_pass()
    synchronize(scale.device)
    elapsed = time.perf_counter() - began
    return {"batch_size": scale.static_batch, "output_tokens": tokens, "seconds": elapsed,
            "tokens_per_s": tokens / elapsed}


def hf_model(model_dir: Path, scale: Scale) -> Any:
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if scale.device == "cuda" else torch.float32
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(scale.device).eval()


def one_pass_small(model: Any, scale: Scale) -> None:
    """A warm-up generate (kernels, allocator)."""
    ids = torch.full((2, 8), 11, dtype=torch.long, device=scale.device)
    with torch.inference_mode():
        model.generate(input_ids=ids, max_new_tokens=2, do_sample=False, pad_token_id=0)


def run_generate_batch(model_dir: Path, prompts: list[list[int]], scale: Scale
                       ) -> dict[str, Any]:
    """transformers' continuous batching (`generate_batch`), where it exists."""
    from transformers import GenerationConfig

    model = hf_model(model_dir, scale)
    if not hasattr(model, "generate_batch"):
        return {"available": False}
    config = GenerationConfig(max_new_tokens=scale.num_output, min_new_tokens=scale.num_output,
                              do_sample=False, eos_token_id=-1, pad_token_id=0)
    model.generate_batch(inputs=prompts[:4], generation_config=config)  # warm-up
    synchronize(scale.device)
    began = time.perf_counter()
    outputs = model.generate_batch(inputs=prompts, generation_config=config)
    synchronize(scale.device)
    elapsed = time.perf_counter() - began
    tokens = sum(len(o.generated_tokens) for o in outputs.values())
    return {"available": True, "output_tokens": tokens, "seconds": elapsed,
            "tokens_per_s": tokens / elapsed}


def profile(model_dir: Path, scale: Scale) -> dict[str, Any]:
    """Kernel launches and the top kernels of a short, warm iterserve run."""
    vocab_size = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    prompts = workload_prompts(scale, vocab_size, seed=1)
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    short = prompts[: scale.profile_requests]
    dtype = "bfloat16" if scale.device == "cuda" else "float32"
    model = load_model(model_dir, dtype=dtype, device=scale.device,
                       attention_backend="auto" if scale.device == "cuda" else "flex")
    num_blocks = len(short) * -(-(scale.max_prompt + scale.profile_output) // 16) + 8
    executor = TorchExecutor(model, num_blocks, 16)
    activities = [ProfilerActivity.CPU]
    if scale.device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    # on this thread (the LLM's engine thread would escape the CPU-side profile)
    run_engine(executor, short, scale.profile_output, "warm", scale.max_num_batched_tokens)  # compile and capture first
    with torch_profile(activities=activities) as prof:
        run_engine(executor, short, scale.profile_output, "profiled",
                   scale.max_num_batched_tokens)
        synchronize(scale.device)
    events = prof.events()
    on_device = [e for e in events if e.device_type.name == "CUDA"]
    sort_key = "self_cuda_time_total" if scale.device == "cuda" else "self_cpu_time_total"
    return {"requests": len(short), "output_tokens_each": scale.profile_output,
            "device_kernels": len(on_device),
            "device_busy_ms": sum(e.device_time for e in on_device) / 1e3,
            # compiled flex attention runs as Triton template kernels (triton_tem_*)
            "attention_kernels": sum("flex" in e.name.lower() or "triton_tem" in e.name
                                     for e in on_device),
            "graph_launches": sum("graphlaunch" in e.name.lower().replace("_", "")
                                  for e in events),
            "table": prof.key_averages().table(sort_by=sort_key, row_limit=15)}


def run_engine(executor: TorchExecutor, prompts: list[list[int]], max_tokens: int,
               prefix: str, max_num_batched_tokens: int) -> None:
    """The prompts through the engine on this thread, greedy, ignore_eos."""
    specs = []
    for i, prompt in enumerate(prompts):
        executor.add_request(f"{prefix}{i}", prompt, greedy_params(max_tokens), seed=i)
        specs.append(RequestSpec(f"{prefix}{i}", 0.0, len(prompt), max_tokens,
                                 prompt_token_ids=tuple(prompt)))
    kv = executor.capacity()
    assert kv.num_blocks_total is not None
    workload = OnlineWorkload(prefix, "ms", Capacity(max_num_batched_tokens, len(prompts)), tuple(specs),
                              kv=KvSpec(kv.num_blocks_total, kv.block_size))
    Engine(workload, make_policy("vllm"), executor).run()


def attention_microbench(scale: Scale) -> dict[str, Any]:
    """One layer's attention alone on synthetic batches (the 730M shape: GQA
    32/8, head dim 64, 16-row blocks): the per-request reference path, the
    FlexAttention path (compiled on CUDA) and, on CUDA, varlen flash
    attention; each one's ms per call and its largest difference from the
    reference. What `auto` should pick on CUDA is read from here."""
    from iterserve.model.llama import flex_call

    device = torch.device(scale.device)
    dtype = torch.bfloat16 if scale.device == "cuda" else torch.float32
    heads, kv_heads, head_dim, block_size = (32, 8, 64, 16) if scale.bench_model else (8, 2, 16, 16)
    rng = random.Random(0)
    big = scale.bench_model is not None
    batches = {
        "decode": [(1, rng.randint(128, 640) if big else rng.randint(4, 40))
                   for _ in range(256 if big else 6)],
        "mixed": ([(1024, 0), (1024, 512)] if big else [(20, 0), (9, 17)])
        + [(1, rng.randint(128, 640) if big else rng.randint(4, 40))
           for _ in range(128 if big else 4)],
    }
    attend = flex_call(device)
    dims = (heads, kv_heads, head_dim, block_size)
    return {name: bench_attention_batch(shape, scale, dims, attend, dtype)
            for name, shape in batches.items()}


def bench_attention_batch(shape: list[tuple[int, int]], scale: Scale,
                          dims: tuple[int, int, int, int], attend: Callable[..., torch.Tensor],
                          dtype: torch.dtype) -> dict[str, Any]:
    """One synthetic batch of (rows, start) segments through every candidate."""
    from iterserve.model.attention import AttentionMetadata, paged_attention
    from iterserve.model.batched_attention import batched_paged_attention
    from iterserve.model.llama import flex_kernel_options
    from iterserve.model.packing import SegmentSpec, pack
    from iterserve.model.staging import layout_for
    from iterserve.model.varlen_attention import VarlenLayout, varlen_paged_attention

    heads, kv_heads, head_dim, block_size = dims
    device = torch.device(scale.device)
    next_block, specs = 0, []
    for num_rows, start in shape:
        num_blocks = -(-(start + num_rows) // block_size)
        specs.append(SegmentSpec([1] * num_rows, start,
                                 range(next_block, next_block + num_blocks), True))
        next_block += num_blocks
    batch = pack(specs, block_size, device)
    generator = torch.Generator(device=device).manual_seed(0)
    pool_shape = (next_block, block_size, kv_heads, head_dim)
    key_pool = torch.randn(pool_shape, generator=generator, device=device).to(dtype)
    value_pool = torch.randn(pool_shape, generator=generator, device=device).to(dtype)
    query = torch.randn(batch.num_rows, heads, head_dim, generator=generator,
                        device=device).to(dtype)
    new_keys = key_pool.view(-1, kv_heads, head_dim)[batch.slot_mapping]
    new_values = value_pool.view(-1, kv_heads, head_dim)[batch.slot_mapping]
    metadata = AttentionMetadata.build(batch, [None], mask_dtype=dtype)
    flex = layout_for(batch, next_block)
    candidates: dict[str, Callable[[], torch.Tensor]] = {
        "per_request": lambda: paged_attention(query, new_keys, new_values, key_pool,
                                               value_pool, metadata, None),
        "flex": lambda: batched_paged_attention(
            query, key_pool, value_pool, flex, None, attend=attend,
            kernel_options=flex_kernel_options(device, block_size)),
    }
    if scale.device == "cuda":
        varlen = VarlenLayout.from_batch(batch)
        candidates["varlen"] = lambda: varlen_paged_attention(query, key_pool, value_pool,
                                                              varlen, None)
    row: dict[str, Any] = {"rows": batch.num_rows, "segments": batch.num_segments}
    with torch.inference_mode():
        expected = candidates["per_request"]().float()
        for label, call in candidates.items():
            try:
                row[label] = time_call(call, expected, scale.device)
            except Exception as error:
                row[label] = {"error": f"{type(error).__name__}: {error}"[:500]}
    return row


def time_call(call: Callable[[], torch.Tensor], expected: torch.Tensor,
              device: str, repeats: int = 20) -> dict[str, float]:
    """ms per call (after three warm-up calls) and the largest difference from `expected`."""
    for _ in range(3):
        got = call()
    synchronize(device)
    began = time.perf_counter()
    for _ in range(repeats):
        call()
    synchronize(device)
    return {"ms": (time.perf_counter() - began) * 1e3 / repeats,
            "max_abs_diff": float((got.float() - expected).abs().max())}


def summary_markdown(report: dict[str, Any]) -> str:
    lines = ["# device check", "", f"device: {report.get('device')}, torch {report['torch']}",
             ""]
    workload = report.get("workload", {})
    if isinstance(workload, dict) and "iterserve" in workload:
        lines += ["| engine | output tok/s | seconds |", "|---|---:|---:|"]
        for name in ("iterserve", "transformers_static", "transformers_generate_batch"):
            row = workload.get(name)
            if isinstance(row, dict) and "tokens_per_s" in row:
                lines.append(f"| {name} | {row['tokens_per_s']:.0f} | {row['seconds']:.2f} |")
        lines.append("")
    for section, value in report.items():
        if section in ("torch", "device"):
            continue
        shown = {k: v for k, v in value.items() if k != "table"} if isinstance(value, dict) \
            else value
        lines += [f"## {section}", "", "```", json.dumps(shown, indent=2, default=str), "```", ""]
    table = report.get("profile", {}).get("table") if isinstance(report.get("profile"),
                                                                   dict) else None
    if table:
        lines += ["## profile: top operators", "", "```", table, "```", ""]
    return "\n".join(lines)


def write_report(out: Path, report: dict[str, Any]) -> None:
    (out / "device_check.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "device_check.md").write_text(summary_markdown(report))


def record(out: Path, report: dict[str, Any], name: str, section: Callable[[], Any]) -> None:
    """Run one section; its result or its error goes into the report, written now."""
    began = time.perf_counter()
    try:
        report[name] = section()
    except Exception as error:  # one failing section must not lose the others
        report[name] = {"error": f"{type(error).__name__}: {error}",
                        "traceback": traceback.format_exc()[-2000:]}
    if isinstance(report[name], dict):
        report[name]["section_seconds"] = time.perf_counter() - began
    write_report(out, report)
    print(f"{name}: done in {time.perf_counter() - began:.1f} s", flush=True)


def workload(out: Path, scale: Scale, save: Callable[[dict[str, Any]], None],
             with_generate_batch: bool = True) -> dict[str, Any]:
    """The three engines on one workload; `save` gets the results after each
    (the baselines first: a failing or slow iterserve run keeps them)."""
    model_dir = bench_model_dir(out, scale)
    config = json.loads((model_dir / "config.json").read_text())
    prompts = workload_prompts(scale, config["vocab_size"])
    results: dict[str, Any] = {
        "model": {k: config[k] for k in ("hidden_size", "num_hidden_layers",
                                         "num_attention_heads", "num_key_value_heads",
                                         "intermediate_size", "vocab_size")},
        "requests": len(prompts), "prompt_tokens": sum(map(len, prompts)),
        "output_tokens_each": scale.num_output}
    parts: dict[str, Callable[[], dict[str, Any]]] = {
        "transformers_static": lambda: run_static(model_dir, prompts, scale),
        "iterserve": lambda: run_iterserve(model_dir, prompts, scale,
                                           "auto" if scale.device == "cuda" else "flex"),
    }
    if with_generate_batch:
        parts["transformers_generate_batch"] = lambda: run_generate_batch(model_dir, prompts,
                                                                          scale)
    for name, part in parts.items():
        try:
            results[name] = part()
        except Exception as error:
            results[name] = {"error": f"{type(error).__name__}: {error}",
                             "traceback": traceback.format_exc()[-1500:]}
        static = results.get("transformers_static", {}).get("tokens_per_s")
        ours = results.get("iterserve", {}).get("tokens_per_s")
        if static and ours:
            results["iterserve_over_static"] = ours / static
        save(results)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--dry-run", action="store_true",
                        help="run every section on the CPU at tiny sizes (no GPU needed)")
    parser.add_argument("--no-generate-batch", action="store_true",
                        help="skip transformers' generate_batch (slow on a CPU)")
    args = parser.parse_args(argv)
    scale = DRY if args.dry_run else FULL
    if scale.device == "cuda" and not torch.cuda.is_available():
        print("device_check: no CUDA device; use --dry-run on a CPU", file=sys.stderr)
        return 2
    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"torch": torch.__version__, "device": (
        torch.cuda.get_device_name() if scale.device == "cuda" else "cpu (dry run)")}
    record(out, report, "correctness", lambda: correctness(out, scale))
    record(out, report, "attention", lambda: attention_microbench(scale))
    if scale.device == "cuda":
        record(out, report, "legacy", lambda: legacy(out))

    def save_workload(partial: dict[str, Any]) -> None:
        report["workload"] = partial
        write_report(out, report)

    record(out, report, "workload",
           lambda: workload(out, scale, save_workload, not args.no_generate_batch))
    bench_dir = out / ("tiny" if scale.bench_model is None else "bench-730m")
    record(out, report, "profile", lambda: profile(bench_dir, scale))
    return 0


if __name__ == "__main__":
    sys.exit(main())
