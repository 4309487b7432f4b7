"""``iterserve sensitivity``: the 0x0E one-control sensitivity table
(F68-F71) from the real scheduler and admission planner on the base
fixture; ``--json`` writes the rows as JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json

from iterserve.lab.sensitivity import SensitivityRow, sensitivity_table

_MIB = 1024 * 1024


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sensitivity", help="change one control at a time (chunk size, budgets, forecasts) on "
                            "a small fixed example and show which counts move (0x0E, F68-F71)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    rows = sensitivity_table()
    if args.json:
        print(json.dumps([dataclasses.asdict(row) for row in rows], indent=2))
        return 0
    print("| axis | control | chunks M | causal pairs | history rows | exposure proxy (MiB) "
          "| piggyback decode rows | reservation intents | aging crossover tick "
          "| ledgers moved | prefill plans unchanged | F68-F71 agree |")
    print("|---" * 12 + "|")
    for row in rows:
        print(_line(row))
    print("\nSynthetic shape ledger (sarathi on the simulated executor; 0x06 point-forecast "
          "planner; aging by formula, no aging policy runs); not a serving benchmark.")
    return 0


def _line(row: SensitivityRow) -> str:
    led = row.ledgers
    control = "-" if row.axis == "base" else f"{row.control}={row.value}"
    cells = [row.axis, control, led.num_chunks, led.causal_pairs, led.history_rows,
             f"{led.exposure_bytes / _MIB:g}", led.piggyback_decode_rows,
             led.reservation_intents, led.aging_crossover_tick, ", ".join(row.moved) or "none",
             "yes" if row.online_plans_unchanged else "no",
             "yes" if row.ledgers == row.formula else "NO"]
    return "| " + " | ".join(str(cell) for cell in cells) + " |"
