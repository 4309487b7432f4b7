"""Differential conformance: iterserve's vllm policies against vLLM's real
v1 Scheduler on identical seeded traces (issue 13, 0x0D). Per regime, the
share of steps at which both chose the same tokens per request and the
same preemptions (a step is compared by index; a run that ends early
counts every missing step as different).

Run from a scratch environment that can import both vllm and iterserve
(see README.md); never a dependency of iterserve:

    python benchmarks/vllm_diff/run.py --seeds 24 [--policy-setting NAME=N ...] [--json OUT]

With no --policy-setting, iterserve's policy runs at its defaults (vLLM 0.32's);
``--policy-setting reserve_full_isl=0`` or
``--policy-setting long_prefill_token_threshold_caps_lone_request=1`` shows what
each of those defaults is worth.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from iterserve_driver import run_iterserve  # noqa: E402
from traces import REGIMES, Regime, make_trace  # noqa: E402


def busy(steps: list[dict]) -> list[dict]:
    """Steps that scheduled or preempted something: vLLM's driver loop takes
    one empty step to flush the last finished request."""
    return [step for step in steps if step["tokens"] or step["preempted"]]


def compare(a: list[dict], b: list[dict]) -> tuple[int, int]:
    """(identical steps, compared steps)."""
    same = sum(x == y for x, y in zip(a, b, strict=False))
    return same, max(len(a), len(b))


def first_divergence(a: list[dict], b: list[dict]) -> dict | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return {"step": i, "vllm": x, "iterserve": y}
    return None


def run_regime(regime: Regime, seeds: int, overrides: dict[str, int]) -> dict:
    from vllm_driver import make_config, run_vllm

    config = make_config(regime)
    same = total = pre_v = pre_i = 0
    examples = []
    for seed in range(seeds):
        trace = make_trace(regime, seed)
        ours = busy(run_iterserve(regime, trace, overrides))
        theirs = busy(run_vllm(regime, trace, config))
        s, t = compare(theirs, ours)
        same, total = same + s, total + t
        pre_v += sum(len(step["preempted"]) for step in theirs)
        pre_i += sum(len(step["preempted"]) for step in ours)
        if s < t and len(examples) < 2:
            examples.append({"seed": seed, **(first_divergence(theirs, ours) or {})})
    return {"regime": regime.name, "traces": seeds, "steps": total, "identical": same,
            "share": round(same / total, 4) if total else None,
            "preemptions_vllm": pre_v, "preemptions_iterserve": pre_i, "examples": examples}


def parse_override(text: str) -> tuple[str, int]:
    name, _, value = text.partition("=")
    if not name or not value.isdigit():
        raise SystemExit(f"error: --policy-setting {text!r}: expected NAME=N")
    return name, int(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=24)
    parser.add_argument("--policy-setting", action="append", default=[], metavar="NAME=N",
                        help="override one of iterserve's policy settings (repeatable)")
    parser.add_argument("--regime", action="append", default=[],
                        help="run only this regime (repeatable; default: all)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    overrides = dict(parse_override(text) for text in args.policy_setting)
    names = {regime.name for regime in REGIMES}
    unknown = sorted(set(args.regime) - names)
    if unknown:
        parser.error(f"unknown regime {unknown[0]!r} (regimes: {', '.join(sorted(names))})")
    chosen = [r for r in REGIMES if not args.regime or r.name in args.regime]
    rows = [run_regime(regime, args.seeds, overrides) for regime in chosen]
    print("| regime | traces | steps | identical | share | preemptions vLLM / iterserve |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['regime']} | {row['traces']} | {row['steps']} | {row['identical']} | "
              f"{row['share']:.1%} | {row['preemptions_vllm']} / {row['preemptions_iterserve']} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
