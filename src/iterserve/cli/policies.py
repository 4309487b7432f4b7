"""``iterserve policies``: list every registered policy with its contract;
``--cited`` lists the methods iterserve cites but does not run (0x0E)."""

from __future__ import annotations

import argparse
import dataclasses

from iterserve.plan import PolicyContract
from iterserve.policies.cited import CITED_METHODS
from iterserve.policies.registry import describe_policy, policy_names


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("policies", help="list the scheduling policies with what each "
                                   "claims and assumes (paper contract, 0x0E)")
    parser.add_argument("name", nargs="?", help="show one policy only")
    parser.add_argument("--cited", action="store_true",
                        help="list the cited methods iterserve does not run (Preble, LayerKV, "
                             "DistServe) instead")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.cited:
        for name, contract in CITED_METHODS.items():
            print(f"{name}  (cited, not runnable)")
            _print_contract(contract)
        return 0
    names = [args.name] if args.name else policy_names()
    for name in names:
        policy = describe_policy(name)
        print(f"{policy.policy_id}@{policy.policy_version}  tie-break {policy.tie_break_key}")
        _print_contract(policy.contract)
    return 0


def _print_contract(contract: PolicyContract) -> None:
    for field in dataclasses.fields(contract):
        print(f"    {field.name}: {getattr(contract, field.name)}")
