"""``iterserve profile MODEL_DIR --out PROFILE.json``: fit an iteration-time
model to the real TorchExecutor (use it with ``simulate --cost-model
profile:PROFILE.json``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from iterserve.cli.flag_types import int_at_least, output_file
from iterserve.cli.output_files import write_text_file
from iterserve.cli.simulate import FlagError, writing_to
from iterserve.policies.settings import add_policy_setting_flag

MAX_THREADS = 1024  # torch intra-op threads: past any machine's cores


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("profile", help="time a real model on a grid of batch shapes and fit "
                                   "a step-time model for simulate --cost-model profile:FILE")
    parser.add_argument("model_dir", type=Path,
                        help="a checkpoint directory (make-model), or a hub id (org/name) "
                             "in the local Hugging Face cache")
    parser.add_argument("--out", type=output_file, required=True, help="profile JSON to write")
    parser.add_argument("--grid", default="full",
                        help="full (default) or quick (fewer batch shapes, sooner)")
    parser.add_argument("--dtype", default="float32", help="float32 or bfloat16")
    parser.add_argument("--policy", default="vllm",
                        help="the scheduling policy the measured batches run under (its own "
                             "time is part of each step); a profile for a chunking policy "
                             "should be measured under one")
    add_policy_setting_flag(parser)
    parser.add_argument("--threads", type=int_at_least(1, MAX_THREADS), default=None,
                        help="torch intra-op threads (default: torch's own choice)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from iterserve.lab.profiling import GRIDS, profile_model
    from iterserve.model.hub import resolve_model
    from iterserve.model.loader import load_model
    from iterserve.model.runtime import DTYPES, set_num_threads
    from iterserve.policies.registry import make_policy

    grid = GRIDS.get(args.grid)
    if grid is None:
        raise FlagError(f"--grid: unknown grid {args.grid!r}; valid grids: {', '.join(GRIDS)}")
    settings = dict(args.policy_setting)
    make_policy(args.policy, **settings)  # an unknown policy or setting fails before model work
    grid = dataclasses.replace(grid, policy=args.policy,
                               policy_settings=tuple(sorted(settings.items())))
    if args.dtype not in DTYPES:
        raise FlagError(f"--dtype: must be one of {', '.join(sorted(DTYPES))}, got {args.dtype!r}")
    if args.threads is not None:
        set_num_threads(args.threads)
    model_dir = resolve_model(args.model_dir).path
    model = load_model(model_dir, dtype=DTYPES[args.dtype])
    with writing_to(f"--out {args.out}"):  # fails before the profiling, not after it
        args.out.parent.mkdir(parents=True, exist_ok=True)
    result = profile_model(model_dir, model, grid)
    with writing_to(f"--out {args.out}"):
        write_text_file(args.out, "--out", json.dumps(result.profile.to_json(), indent=2) + "\n")
    fit = result.profile.fit
    print(f"profiled {result.num_samples} iterations in {result.elapsed_s:.1f} s; held-out "
          f"relative error: mean {fit.mean_relative_error:.1%}, max "
          f"{fit.max_relative_error:.1%} ({fit.num_heldout} iterations); wrote {args.out}")
    return 0
