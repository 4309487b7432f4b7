"""Offline scoring of a run's admission estimates (0x06), after hidden truth
is revealed: for every request the admission screen would reserve for, the
estimated future rows at admission (U + max(G_hat - 1, 0)) against the rows
its realized length needed. Over-reservation wastes capacity; under-
reservation is what preemption or extension had to cover. Runs after the
simulation ends; no policy ever sees this."""

from __future__ import annotations

from typing import Any

from iterserve.admission.records import future_append_rows
from iterserve.admission.screen import ReservationScreen, parse_admission
from iterserve.records.spec import HiddenTruth, OnlineWorkload
from iterserve.records.view import RequestView


def admission_report(workload: OnlineWorkload, hidden: HiddenTruth,
                     bytes_per_row: int | None) -> dict[str, Any] | None:
    if workload.kv is None:
        return None
    policy = parse_admission(workload.kv.admission)
    if policy is None:
        return None
    over = under = 0
    for spec in workload.requests:
        realized = hidden.realized_output_tokens.get(spec.request_id)
        if realized is None:
            continue
        view = RequestView(spec.request_id, 0, 0, spec.client_id, spec.priority, spec.arrival,
                           0, spec.num_prompt_tokens, spec.max_output_tokens,
                           output_forecast=spec.output_forecast,
                           output_forecast_p90=spec.output_forecast_p90)
        candidate = ReservationScreen.candidate(view)
        estimate = future_append_rows(candidate, policy.forecast_total_outputs(candidate))
        actual = future_append_rows(candidate, min(realized, spec.max_output_tokens))
        over += max(estimate - actual, 0)
        under += max(actual - estimate, 0)

    def as_bytes(rows: int) -> int | None:
        return None if bytes_per_row is None else rows * bytes_per_row

    return {
        "policy": policy.policy_id,
        "over_reservation_rows": over,
        "under_reservation_rows": under,
        "over_reservation_bytes": as_bytes(over),
        "under_reservation_bytes": as_bytes(under),
        "label": "offline: estimates at admission vs realized lengths (hidden truth revealed)",
    }
