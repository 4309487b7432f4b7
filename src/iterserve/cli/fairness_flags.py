"""The fairness flags of ``simulate`` and ``sweep`` (0x09A): service weights,
the starvation guard's horizon and the F63 observation horizon, and the
``vtc`` bound a run prints beside its observed gap."""

from __future__ import annotations

import argparse
from typing import Any

from iterserve.cli.flag_types import finite_float
from iterserve.cost import IterationCostModel, seconds_per_clock_unit
from iterserve.plan import Policy
from iterserve.records.spec import FairnessSpec, OnlineWorkload
from iterserve.sim.fairness_bound import vtc_bound_report
from iterserve.sim.report import BoundOf, SimulationRun

_WEIGHT = finite_float(0.0)
_HORIZON = finite_float(0.0, exclusive_min=True)


class FairnessFlagError(ValueError):
    """A fairness flag is malformed (one line, exit 2)."""


def add_fairness_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt-weight", type=_WEIGHT, default=None,
                        help="fairness: what one computed prompt token counts as service "
                             "(w_p; default: the workload's fairness section, else 1)")
    parser.add_argument("--output-weight", type=_WEIGHT, default=None,
                        help="fairness: what one output token counts as service (w_q; "
                             "default: the workload's fairness section, else 1)")
    parser.add_argument("--client-weight", action="append", default=None, metavar="CLIENT=W",
                        help="fairness: a client's share, its service is divided by W "
                             "(client weight; repeatable; default 1)")
    parser.add_argument("--starvation-horizon", type=_HORIZON, default=None, metavar="H",
                        help="a client with work waiting but no service for H clock units "
                             "(iterations or ms) gets its oldest request scheduled next "
                             "(starvation guard, F63; default: the workload's, else off)")


def add_fairness_horizon_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fairness-horizon", type=_HORIZON, default=None, metavar="H",
                        help="report a client as starved when it waited H clock units "
                             "without service (starvation horizon, F63; default: the whole "
                             "observation window)")


def fairness_from_flags(prompt_weight: float | None, output_weight: float | None,
                        client_weights: tuple[str, ...], starvation_horizon: float | None,
                        declared: FairnessSpec | None) -> FairnessSpec | None:
    """The workload's ``fairness`` section with each given flag overriding it."""
    if (prompt_weight is None and output_weight is None and not client_weights
            and starvation_horizon is None):
        return declared
    base = declared or FairnessSpec()
    weights = dict(base.client_weights)
    for text in client_weights:
        client, sep, value = text.partition("=")
        try:
            weights[client] = float(value)
        except ValueError:
            sep = ""
        if not sep or not client:
            raise FairnessFlagError(f"--client-weight: expected CLIENT=W, got {text!r}")
    try:
        return FairnessSpec(
            base.prompt_weight if prompt_weight is None else prompt_weight,
            base.output_weight if output_weight is None else output_weight,
            tuple(sorted(weights.items())),
            base.starvation_horizon if starvation_horizon is None else starvation_horizon)
    except ValueError as exc:
        raise FairnessFlagError(str(exc)) from None


def horizon_seconds(horizon: float | None, online: OnlineWorkload,
                    cost_model: IterationCostModel) -> float | None:
    """The F63 horizon (clock units) in seconds of the event log; None: the
    window. The guard's horizon is not reused: a forced interval completes
    one iteration after the guard fires."""
    if horizon is None:
        return None
    return float(horizon * seconds_per_clock_unit(online.clock, cost_model))


def bound_of(policy: Policy, online: OnlineWorkload, run: SimulationRun,
             kv: dict[str, Any] | None) -> BoundOf | None:
    """The policy's declared service-difference bound, if it declares one (vtc)."""
    weights = getattr(policy, "ledger_weights", None)
    if getattr(policy, "service_bound", None) != "vtc" or weights is None:
        return None
    facts = run.executor.capacity()
    preemptions = 0 if kv is None else sum(
        value for key, value in kv["preemptions"].items() if key != "reason")
    spread = run.ledger_trace.max_counter_spread
    widest = None if spread is None else spread["value"]
    return lambda fairness: vtc_bound_report(online, weights, facts.num_blocks_total,
                                             facts.block_size, preemptions, fairness, widest)
