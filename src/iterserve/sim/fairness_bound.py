"""VTC's conditional service-difference bound beside the observed gap (F57-F60).

F58, the counter spread max_i c_i - min_i c_i <= U over active clients while
the queue is nonempty, is checked beside it from the widest spread the
ledger trace saw (``spread_holds``; None when the run saw no such decision).

U = max(w_p * L_input, w_q * M) is the largest one-step counter charge
(F57); for two clients backlogged over an interval the paper proves
|W_f - W_g| <= 2U (F60) under five premises. A run states what it can
check: L_input is the longest prompt offered; M is the token rows the
running batch can hold (the run's KV capacity); the bound applies only when
M is finite and the run preempted nothing. Client weights divide service,
so U is divided by the smallest client weight.
"""

from __future__ import annotations

from typing import Any

from iterserve.metrics.fairness import FairnessReport
from iterserve.records.spec import FairnessSpec, OnlineWorkload

PREMISES = ("both clients continuously backlogged over the interval (the gap measure's domain)",
            "Algorithm 2 counter lift and charging (policy vtc)",
            "work-conserving under the memory criterion",
            "no preemption", "finite L_input and M")


def vtc_charge_bound(weights: FairnessSpec, max_input_tokens: int, max_batch_tokens: int
                     ) -> tuple[float, float]:
    """(U, 2U) of F57 and F60."""
    u = max(weights.prompt_weight * max_input_tokens, weights.output_weight * max_batch_tokens)
    min_phi = min((phi for _, phi in weights.client_weights), default=1.0)
    u /= min(min_phi, 1.0)
    return u, 2 * u


def vtc_bound_report(workload: OnlineWorkload, weights: FairnessSpec,
                     num_blocks_total: int | None, block_size: int, num_preemptions: int,
                     fairness: FairnessReport, max_counter_spread: float | None = None
                     ) -> dict[str, Any]:
    """F60 beside the observed gap, and F58 beside the widest counter spread
    the run showed over active clients while a request waited."""
    gap = fairness.max_backlogged_gap
    observed = 0.0 if gap is None else gap.value
    max_input = max((r.num_prompt_tokens for r in workload.requests), default=0)
    batch_rows = None if num_blocks_total is None else num_blocks_total * block_size
    record: dict[str, Any] = {
        "name": "VTC Theorem 4.4: |W_f - W_g| <= 2U (F60)", "L_input": max_input,
        "M": batch_rows, "num_preemptions": num_preemptions, "observed_max_gap": observed,
        "premises": list(PREMISES), "observed_max_counter_spread": max_counter_spread,
    }
    if batch_rows is None or num_preemptions:
        why = "unbounded memory (M)" if batch_rows is None else "the run preempted"
        return {**record, "applies": False, "U": None, "bound": None, "holds": None,
                "spread_holds": None, "premises_text": f"not met: {why}; no bound is claimed"}
    u, bound = vtc_charge_bound(weights, max_input, batch_rows)
    spread_holds = None if max_counter_spread is None else max_counter_spread <= u
    return {**record, "applies": True, "U": u, "bound": bound, "holds": observed <= bound,
            "spread_holds": spread_holds, "premises_text": "; ".join(PREMISES)}
