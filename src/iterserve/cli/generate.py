"""``iterserve generate MODEL_DIR --prompt ... | --prompts-file FILE``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from iterserve.policies.settings import add_policy_setting_flag, parse_settings


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("generate", help="generate text with a local checkpoint")
    parser.add_argument("model_dir", type=Path)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    source.add_argument("--prompts-file", type=Path, help="one prompt per line")
    parser.add_argument("--policy", default="vllm")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    parser.add_argument("--ignore-eos", action="store_true")
    parser.add_argument("--token-budget", type=int, default=512)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--kv-blocks", type=int, default=1024)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--chunk-size", type=int, default=None)
    add_policy_setting_flag(parser)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", action="store_true", help="print one JSON object per output")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from iterserve.llm import LLM, EngineConfig
    from iterserve.model.params import SamplingParams

    prompts = args.prompt or [
        line.rstrip("\n") for line in args.prompts_file.read_text().splitlines() if line.strip()
    ]
    config = EngineConfig(
        policy=args.policy, token_budget=args.token_budget, max_num_seqs=args.max_num_seqs,
        kv_blocks=args.kv_blocks, block_size=args.block_size, chunk_size=args.chunk_size,
        extra_policy_settings=tuple(parse_settings(args.policy_setting).items()),
        dtype=args.dtype, device=args.device,
    )
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
