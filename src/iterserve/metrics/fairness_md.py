"""``report.md`` fairness section (0x09A): service, gap, starvation, Jain's
index and, beside them, the SLO outcomes of each client (0x07): fairness
figures alone would hide SLO misses, and SLO figures alone would hide whom
the misses fell on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from iterserve.metrics.fairness import FairnessReport
from iterserve.metrics.outcomes import OutcomeCounts
from iterserve.metrics.time_unit import SECONDS, TimeUnit


def render_fairness(
    report: FairnessReport,
    outcomes: Mapping[str, OutcomeCounts] | None = None,
    bound: Mapping[str, Any] | None = None,
    guard: Mapping[str, Any] | None = None,
    unit: TimeUnit = SECONDS,
) -> str:
    """The fairness section; ``outcomes`` per client when an SLO was judged;
    ``bound`` a policy's declared service-difference bound beside the observed
    gap. Times are shown in ``unit`` (iterations on the iteration clock)."""
    weights = report.weights
    name = "iterations" if unit.is_iterations else "s"
    lines = [
        "## Fairness between clients (0x09A)",
        "",
        "Clients are told apart by client_id. A client's service is the work completed for "
        f"it: w_p={weights.prompt_weight:g} per prompt token computed plus "
        f"w_q={weights.output_weight:g} per output token, divided by the client's weight. "
        "Only completed work counts: planned work and rebuilding after a preemption earn "
        "nothing.",
        "",
        f"| client | weight | weighted work done (service) | completions counted "
        f"| time with work waiting (backlogged, {name}) "
        f"| longest wait without service (longest unserved, {name}) "
        f"| waited past the horizon (starved) | within targets (SLO-valid) | late (miss) "
        f"| turned away (rejected) | not finished (unfinished) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for client in report.per_client:
        counts = None if outcomes is None else outcomes.get(client.client_id)
        slo = ("-",) * 4 if counts is None else (
            counts.num_slo_valid, counts.num_completed_miss, counts.num_rejected,
            counts.num_unfinished)
        lines.append(
            f"| {client.client_id} | {client.weight:g} | {client.service:g} "
            f"| {client.num_completed_events} | {unit.from_s(client.backlogged_s):g} "
            f"| {unit.from_s(client.longest_unserved_s):g} "
            f"| {'yes' if client.is_starved else 'no'} "
            f"| {' | '.join(str(value) for value in slo)} |")
    lines += ["", *_summary(report, bound, unit, name), ""]
    if guard is not None:
        lines.insert(-1, f"- starvation guard (horizon {guard['horizon']:g} clock units): "
                         f"fired {guard['num_fired']} time(s)")
    return "\n".join(lines)


def _summary(report: FairnessReport, bound: Mapping[str, Any] | None, unit: TimeUnit,
             name: str) -> list[str]:
    gap = report.max_backlogged_gap
    jain = report.jain_index
    lines = [
        "- largest difference in service between two clients while both had work waiting "
        "(max service gap): "
        + ("n/a (no two clients backlogged together)" if gap is None else
           f"{gap.value:g} ({gap.clients[0]} over {gap.clients[1]} on "
           f"({unit.from_s(gap.interval_s[0]):g}, {unit.from_s(gap.interval_s[1]):g}] {name})"),
        "- clients left without service longer than the horizon "
        f"(starved, F63, horizon {unit.from_s(report.horizon_s):g} {name}, "
        f"{report.horizon_source}): "
        f"{len(report.starved_clients)} {list(report.starved_clients)}",
        *_blocked_line(report, unit, name),
        "- how evenly clients with work waiting were served, 1 = equally "
        "(Jain's index over backlogged service rates): "
        + ("n/a" if jain is None else f"{jain:.4f}"),
    ]
    if bound is not None and bound["bound"] is not None:
        lines.append(f"- the policy's promised limit on that difference, declared bound "
                     f"({bound['name']}): {bound['bound']:g} "
                     f"(U={bound['U']:g}, L_input={bound['L_input']}, M={bound['M']}); "
                     f"observed max gap {bound['observed_max_gap']:g}; "
                     f"premises: {bound['premises_text']}")
        spread = bound.get("observed_max_counter_spread")
        if spread is not None:
            lines.append(f"- the widest VTC counter spread over active clients while a "
                         f"request waited (F58, max c_i - min c_i <= U={bound['U']:g}): "
                         f"{spread:g}")
    elif bound is not None:
        lines.append(f"- the policy's promised limit on that difference, declared bound "
                     f"({bound['name']}): {bound['premises_text']}; "
                     f"observed max gap {bound['observed_max_gap']:g}")
    return lines


def _blocked_line(report: FairnessReport, unit: TimeUnit, name: str) -> list[str]:
    """The time each client's wait did not count toward starvation: every
    request it had waiting was blocked on a foreign fact (F63 eligibility);
    no line for a log that records no readiness change."""
    if not report.excludes_blocked:
        return []
    blocked = ", ".join(f"{client.client_id} {unit.from_s(client.blocked_on_readiness_s):g}"
                        for client in report.per_client)
    return ["- time with work waiting that did not count toward starvation because every "
            "request waiting was blocked on a foreign fact such as remote K/V (blocked on "
            f"readiness, not eligible, F63; {name}): {blocked}"]
