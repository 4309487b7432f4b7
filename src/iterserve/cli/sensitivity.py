"""``iterserve sensitivity``: the 0x0E one-control sensitivity table
(ten cases over nine axes, F68-F72 and F61) from the code paths that own
each ledger on the base fixture; ``--json`` writes the rows as JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json

from iterserve.lab.sensitivity import SensitivityRow, sensitivity_table

_MIB = 1024 * 1024


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sensitivity", help="change one control at a time (chunk size, budgets, forecast, aging, "
                            "client mix, prefix hit, foreign readiness, hidden output) on a small "
                            "fixed example and show which counts move (0x0E, F68-F72, F61)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    rows = sensitivity_table()
    if args.json:
        print(json.dumps([dataclasses.asdict(row) for row in rows], indent=2))
        return 0
    print("| axis | control | chunks M | causal pairs | history rows | exposure proxy (MiB) "
          "| piggyback decode rows | reservation intents | aging crossover tick "
          "| completed A/B | uncached prompt rows | prompt eligible "
          "| ledgers moved | prefill plans unchanged | formulas agree |")
    print("|---" * 15 + "|")
    for row in rows:
        print(_line(row))
    print("\nSynthetic shape ledger (sarathi, priority-aging and vtc on the simulated executor; "
          "the 0x06 point-forecast planner; the block manager's prefix lookup; the engine's "
          "readiness board); not a serving benchmark.")
    return 0


def _line(row: SensitivityRow) -> str:
    led = row.ledgers
    control = "-" if row.axis == "base" else f"{row.control}={_text(row.value)}"
    cells = [row.axis, control, led.num_chunks, led.causal_pairs, led.history_rows,
             f"{led.exposure_bytes / _MIB:g}", led.piggyback_decode_rows,
             led.reservation_intents, _text(led.aging_crossover_tick),
             "/".join(map(str, led.client_completed)), led.uncached_prompt_rows,
             _text(led.prompt_eligible), ", ".join(row.moved) or "none",
             "yes" if row.online_plans_unchanged else "no",
             "yes" if row.ledgers == row.formula else "NO"]
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "never" if value is None else str(value)
