"""Factual headroom and predicted slack under a named cost model (0x07, F32-F34).

Four objects that are often all called "latency":

- deadline d_r: factual, from original arrival (F30) or previous output (F31);
- headroom h_r(n) = d_r - n: wall-clock time left, says nothing about work;
- predicted finish f_r(n; m) = n + c_r(n; m) under a *named* model m;
- predicted slack s_r(n; m) = d_r - f_r(n; m) = h_r(n) - c_r(n; m).

Negative slack means the endpoint is infeasible even under the model's
optimistic exclusive-service assumption (if the model is a valid lower
bound). Positive slack is not a guarantee: contention, batch shape,
allocation failure and model error can spend it.

Consumers: least-slack / EDF policies and SLO-feasible admission. Policies
receive only online facts here (arrival, emissions, remaining prompt rows);
no realized output length is needed or accepted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from iterserve.cost import IterationCostModel
from iterserve.metrics.clocks import endpoint_deadline_s
from iterserve.metrics.slo import SloConfig


def headroom_s(deadline_s: float, now_s: float) -> float:
    """F32: h_r(n) = d_r - n."""
    return deadline_s - now_s


def exclusive_endpoint_cost_s(
    cost_model: IterationCostModel,
    *,
    num_outputs_emitted: int,
    num_prompt_rows_remaining: int,
    max_prefill_rows_per_iteration: int | None = None,
) -> float:
    """c_r(n; m) under exclusive service, the 0x07 lower bound
    (``exclusive_endpoint_lower_bound_v1`` when m is fixed-iteration):

    - waiting for output 0: the remaining prompt rows in chunks of at most
      ``max_prefill_rows_per_iteration`` (one chunk when ``None``);
    - live stream: one decode iteration carrying this request's single row.
    """
    if num_outputs_emitted < 0 or num_prompt_rows_remaining < 0:
        raise ValueError("counts must be >= 0")
    if num_outputs_emitted > 0:
        return cost_model.predict_iteration_s(0, 1)
    if num_prompt_rows_remaining == 0:
        raise ValueError("a request with no output has prompt rows left (0x01A)")
    chunk_rows = max_prefill_rows_per_iteration or num_prompt_rows_remaining
    if chunk_rows < 1:
        raise ValueError("max_prefill_rows_per_iteration must be >= 1")
    full_chunks, last_rows = divmod(num_prompt_rows_remaining, chunk_rows)
    cost_s = full_chunks * cost_model.predict_iteration_s(chunk_rows, 0)
    if last_rows:
        cost_s += cost_model.predict_iteration_s(last_rows, 0)
    return cost_s


@dataclass(frozen=True, slots=True)
class SlackEstimate:
    """One request's slack at one scheduler time. ``clock`` is ``"ttft"`` while
    waiting for output 0 and ``"tbt"`` afterwards; with no declared limit for
    that clock the deadline, headroom and slack are ``math.inf``."""

    now_s: float
    clock: str
    deadline_s: float
    headroom_s: float
    predicted_cost_s: float
    predicted_finish_s: float  # F33
    slack_s: float  # F34
    model_id: str


def predicted_slack(
    now_s: float,
    *,
    arrival_s: float,
    last_emission_s: float | None,
    num_outputs_emitted: int,
    num_prompt_rows_remaining: int,
    slo: SloConfig,
    cost_model: IterationCostModel,
    max_prefill_rows_per_iteration: int | None = None,
) -> SlackEstimate:
    """Deadline, headroom and predicted slack of one request (F30-F34).

    The same request moves from its TTFT clock to its TBT clock when output 0
    is emitted; its identity and deadline origins never change.
    """
    if (num_outputs_emitted == 0) != (last_emission_s is None):
        raise ValueError("last_emission_s must be given exactly when outputs were emitted")
    deadline = endpoint_deadline_s(
        arrival_s, last_emission_s, ttft_limit_s=slo.ttft_s, tbt_limit_s=slo.tbt_s
    )
    deadline_s = math.inf if deadline is None else deadline
    cost_s = exclusive_endpoint_cost_s(
        cost_model,
        num_outputs_emitted=num_outputs_emitted,
        num_prompt_rows_remaining=num_prompt_rows_remaining,
        max_prefill_rows_per_iteration=max_prefill_rows_per_iteration,
    )
    return SlackEstimate(
        now_s=now_s,
        clock="ttft" if num_outputs_emitted == 0 else "tbt",
        deadline_s=deadline_s,
        headroom_s=headroom_s(deadline_s, now_s),
        predicted_cost_s=cost_s,
        predicted_finish_s=now_s + cost_s,
        slack_s=deadline_s - (now_s + cost_s),
        model_id=cost_model.model_id,
    )
