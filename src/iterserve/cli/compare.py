"""``iterserve compare RUN_DIR...``: comparable runs in one table and one
set of plots; every pair that differs in a comparison coordinate is
refused and the coordinates named (0x0E, F67)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from iterserve.cli.flag_types import output_dir
from iterserve.cli.simulate import writing_to
from iterserve.lab.compare import Comparison, compare_runs
from iterserve.lab.compare_md import render_comparison
from iterserve.lab.inputs import load_runs
from iterserve.records.failures import failure_of


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare", help="put runs side by side, ranking only runs measured under the same "
                        "conditions (coordinates, 0x0E) and naming what differs for the rest")
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN",
                        help="a simulate --out directory, a report.json or a result registry")
    parser.add_argument("--out", type=output_dir, default=None,
                        help="write compare.md, compare.json and PNG plots here")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    runs = [r for path in args.runs for r in load_runs(path)]
    comparison = compare_runs(runs)
    text = render_comparison(comparison)
    if args.out is not None:  # made before anything is printed: a failure prints one line
        with writing_to(f"--out {args.out}"):
            args.out.mkdir(parents=True, exist_ok=True)
    print(text, end="")
    if args.out is not None:
        (args.out / "compare.md").write_text(text)
        (args.out / "compare.json").write_text(json.dumps(_to_json(comparison), indent=2) + "\n")
        from iterserve.lab.compare_plot import plot_comparison

        plot_comparison(comparison, args.out)
    return 0


def _to_json(comparison: Comparison) -> dict[str, Any]:
    return {
        "num_comparable_pairs": comparison.num_comparable_pairs,
        "groups": [list(g) for g in comparison.groups],
        "refused": [{"a": v.a, "b": v.b, "differing": list(v.differing),
                     "failure": failure_of("incomparable_pair").failure_id}
                    for v in comparison.verdicts if not v.is_comparable],
        "rankings": [[{"metric": list(r.metric), "order": [list(o) for o in r.order],
                       "withheld": list(r.withheld)} for r in group]
                     for group in comparison.rankings],
    }
