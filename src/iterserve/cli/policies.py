"""``iterserve policies``: list every registered policy with its contract."""

from __future__ import annotations

import argparse
import dataclasses

from iterserve.policies.registry import describe_policy, policy_names


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("policies", help="list policies and their contracts (0x0E)")
    parser.add_argument("name", nargs="?", help="show one policy only")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    names = [args.name] if args.name else policy_names()
    for name in names:
        policy = describe_policy(name)
        print(f"{policy.policy_id}@{policy.policy_version}  tie-break {policy.tie_break_key}")
        for field in dataclasses.fields(policy.contract):
            print(f"    {field.name}: {getattr(policy.contract, field.name)}")
    return 0
