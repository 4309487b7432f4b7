"""``iterserve make-model DIR --preset tiny|small``: a random-weight local checkpoint."""

from __future__ import annotations

import argparse

from iterserve.cli.flag_types import SEED, output_dir
from iterserve.model.presets import PRESETS


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("make-model", help="write a Llama checkpoint with random weights and a "
                                   "local tokenizer (for tests, demos and benchmarks)")
    parser.add_argument("dir", type=output_dir, help="output directory (absent or a directory)")
    parser.add_argument("--preset", default="tiny", choices=sorted(PRESETS),
                        help="tiny (tests, demo) or small (benchmarks)")
    parser.add_argument("--seed", type=SEED, default=0)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from iterserve.model.make_model import make_model

    path = make_model(args.dir, args.preset, args.seed)
    print(f"wrote {args.preset} checkpoint (seed {args.seed}) to {path}")
    return 0
