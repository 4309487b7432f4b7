"""``iterserve generate MODEL_DIR --prompt ... | --prompts-file FILE``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from iterserve.cli.flag_types import (
    POSITIVE_INT,
    SEED,
    add_attention_backend_flag,
    finite_float,
    int_at_least,
    non_empty,
    renamed_flag,
)
from iterserve.cli.simulate import FlagError
from iterserve.policies.settings import add_policy_setting_flag
from iterserve.records.limits import MAX_BLOCK_SIZE, MAX_BUDGET, MAX_NUM_BLOCKS, MAX_OUTPUT_TOKENS
from iterserve.records.workload import read_text_file


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("generate", help="generate text with a local checkpoint")
    parser.add_argument("model_dir", type=Path,
                        help="a checkpoint directory, or a hub id (org/name) in the local "
                             "Hugging Face cache")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", action="append", type=non_empty, help="a prompt (repeatable)")
    source.add_argument("--prompts-file", type=Path, help="one prompt per line (UTF-8)")
    parser.add_argument("--policy", default="vllm", type=non_empty,
                        help="scheduling policy (see `iterserve policies`; default vllm)")
    parser.add_argument("--max-tokens", type=int_at_least(1, MAX_OUTPUT_TOKENS), default=32,
                        help="most output tokens per prompt (default 32)")
    parser.add_argument("--temperature", type=finite_float(0.0), default=0.0,
                        help="sampling temperature; 0 picks the likeliest token (default)")
    parser.add_argument("--top-k", type=POSITIVE_INT, default=None,
                        help="sample among the K likeliest tokens only")
    parser.add_argument("--top-p", type=finite_float(0.0, 1.0, exclusive_min=True), default=1.0,
                        help="sample among the likeliest tokens whose probabilities sum to P")
    parser.add_argument("--seed", type=SEED, default=None,
                        help="sampling seed (each prompt's draws are reproducible)")
    parser.add_argument("--stop", action="append", type=non_empty, default=[],
                        help="stop string (repeatable)")
    parser.add_argument("--ignore-eos", action="store_true",
                        help="keep going past the end-of-sequence token up to --max-tokens")
    parser.add_argument("--max-num-batched-tokens", type=int_at_least(1, MAX_BUDGET), default=512,
                        help="most prompt and output tokens computed in one scheduler step "
                             "(default 512)")
    parser.add_argument("--token-budget", dest="max_num_batched_tokens",
                        type=int_at_least(1, MAX_BUDGET), action=renamed_flag(
                            "--max-num-batched-tokens"), help=argparse.SUPPRESS)
    parser.add_argument("--max-num-seqs", type=int_at_least(1, MAX_BUDGET), default=64,
                        help="most requests in one scheduler step (default 64)")
    kv = parser.add_mutually_exclusive_group()
    kv.add_argument("--num-kv-blocks", "--kv-blocks", dest="num_kv_blocks",
                    type=int_at_least(1, MAX_NUM_BLOCKS), default=None,
                    help="KV pool size in blocks (as `serve`; --kv-blocks is the older "
                         "spelling, kept as an alias; default: sized from free memory)")
    kv.add_argument("--kv-cache-memory", type=POSITIVE_INT, default=None,
                    help="KV pool size in bytes")
    parser.add_argument("--block-size", type=int_at_least(1, MAX_BLOCK_SIZE), default=16,
                        help="tokens per KV cache block (default 16)")
    parser.add_argument("--chunk-size", type=int_at_least(1, MAX_BUDGET), default=None,
                        help="prompt tokens per prefill chunk, for the chunking policies")
    add_policy_setting_flag(parser)
    parser.add_argument("--dtype", default="auto",
                        choices=["auto", "float32", "bfloat16", "float16"],
                        help="weights' number format (auto: what the checkpoint declares)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where the model runs (default cpu)")
    add_attention_backend_flag(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object per output")
    parser.set_defaults(run=run)


def read_prompts(path: Path) -> list[str]:
    """The non-blank lines of a UTF-8 file; anything else is a :class:`FlagError`."""
    text = read_text_file(path, FlagError, label="--prompts-file: ")
    prompts = [line for line in text.splitlines() if line.strip()]
    if not prompts:
        raise FlagError(f"--prompts-file: {path}: holds no prompt")
    return prompts


def check_device(device: str) -> None:
    from iterserve.model.runtime import cuda_available

    if device == "cuda" and not cuda_available():
        raise FlagError("--device cuda: this torch build has no usable CUDA device; use --device cpu")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from iterserve.llm import LLM, EngineConfig
    from iterserve.records.sampling_params import SamplingParams

    prompts = args.prompt or read_prompts(args.prompts_file)
    check_device(args.device)
    try:
        config = EngineConfig(
            policy=args.policy, max_num_batched_tokens=args.max_num_batched_tokens,
            max_num_seqs=args.max_num_seqs,
            num_kv_blocks=args.num_kv_blocks, kv_cache_memory=args.kv_cache_memory,
            block_size=args.block_size, chunk_size=args.chunk_size,
            extra_policy_settings=tuple(dict(args.policy_setting).items()),
            dtype=args.dtype, device=args.device, attention_backend=args.attention_backend,
        )
    except ValueError as exc:
        raise FlagError(str(exc)) from None
    params = SamplingParams(
        max_tokens=args.max_tokens, temperature=args.temperature, top_k=args.top_k,
        top_p=args.top_p, seed=args.seed, stop=tuple(args.stop), ignore_eos=args.ignore_eos,
    )
    llm = LLM(args.model_dir, config)
    # the bar goes to stderr: stdout carries only the outputs (JSON lines with --json)
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("generating", total=len(prompts))
        outputs = llm.generate(prompts, params,
                               on_step=lambda done, total: progress.update(task, completed=done))
    for prompt, out in zip(prompts, outputs, strict=True):
        if args.json:
            print(json.dumps({"prompt": prompt, "text": out.text, "token_ids": list(out.token_ids),
                              "finish_reason": out.finish_reason,
                              "first_token_ms": out.first_token_ms, "finish_ms": out.finish_ms}))
        else:
            print(f"{prompt!r} -> {out.text!r} [{out.finish_reason}]")
    return 0
