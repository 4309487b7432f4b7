"""Hand-built 0x07 fixtures and a tiny tick oracle that cross-checks them.

The spec's burst and saturation tables did not survive extraction, so the
timelines below are the smallest ones from which every stated fact follows
(spec/README.md). ``least_slack_tick_oracle`` re-derives them from the 0x07
rules (10 ms ticks, 2 rows per tick, least predicted slack under the
fixed-iteration model, tie-break next token -> arrival -> request id) so that
the literal logs are not merely asserted but derived. It is a test oracle, not
the simulator: a later engineer reproduces these logs from the real one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from iterserve.cost import FixedIterationCost
from iterserve.metrics import (
    AdmitEvent,
    ArrivalEvent,
    ComputeEvent,
    Event,
    EventLog,
    FinishEvent,
    FirstTokenEvent,
    RejectEvent,
    SloConfig,
    TokenEvent,
    predicted_slack,
)

TICK_S = 0.01
ROWS_PER_TICK = 2
BURST_SLO = SloConfig(ttft_ms=30.0, tbt_ms=20.0)


def at_tick(tick: int) -> float:
    """k * 10 ms as the float literal k/100 (0.03, not 0.01 + 0.01 + 0.01)."""
    return tick / 100


def stream(
    request_id: str,
    arrival_s: float,
    emission_s: Sequence[float],
    *,
    admit_s: float | None = None,
    client_id: str = "default",
    finish: bool = True,
) -> list[Event]:
    """Events of one admitted request that emits outputs at ``emission_s``."""
    events: list[Event] = [
        ArrivalEvent(arrival_s, request_id, client_id=client_id, num_prompt_tokens=1),
        AdmitEvent(arrival_s if admit_s is None else admit_s, request_id),
    ]
    for index, time_s in enumerate(emission_s):
        if index == 0:
            events.append(ComputeEvent(time_s, request_id, num_rows=1))
            events.append(FirstTokenEvent(time_s, request_id))
        else:
            events.append(TokenEvent(time_s, request_id, token_index=index))
    if finish:
        events.append(
            FinishEvent(emission_s[-1], request_id, reason="eos", num_output_tokens=len(emission_s))
        )
    return events


def rejected(request_id: str, arrival_s: float, reason: str = "max_live") -> list[Event]:
    return [
        ArrivalEvent(arrival_s, request_id, num_prompt_tokens=1),
        RejectEvent(arrival_s, request_id, reason=reason),
    ]


def merged(*groups: Sequence[Event]) -> EventLog:
    """One clock-ordered log; equal times keep group order (stable sort)."""
    flat = [event for group in groups for event in group]
    return EventLog(sorted(flat, key=lambda event: event.time_s))


def burst_accept_all() -> EventLog:
    """0x07 burst, accept-all: every response emitted, E and F miss TTFT.

    tick  t(ms)  rows            why (predicted slack, ms)
    0     0      A,B prefill     all six waiting: slack 20; id order
    1     10     A,B decode      A,B next-token slack 10 ties C..F first-token 10; next token wins
    2     20     C,D prefill     C..F slack 0
    3     30     E,F prefill     E,F slack -10 < C,D next-token slack 10
    4     40     C,D decode      C,D slack 0 < E,F 10
    5     50     E,F decode
    """
    return merged(
        stream("A", 0.0, [at_tick(1), at_tick(2)]),
        stream("B", 0.0, [at_tick(1), at_tick(2)]),
        stream("C", 0.0, [at_tick(3), at_tick(5)]),
        stream("D", 0.0, [at_tick(3), at_tick(5)]),
        stream("E", 0.0, [at_tick(4), at_tick(6)]),
        stream("F", 0.0, [at_tick(4), at_tick(6)]),
    )


def burst_four_live_cap() -> EventLog:
    """0x07 burst, four-live cap: A-D admitted and all valid, E and F rejected."""
    return merged(
        stream("A", 0.0, [at_tick(1), at_tick(2)]),
        stream("B", 0.0, [at_tick(1), at_tick(2)]),
        stream("C", 0.0, [at_tick(3), at_tick(4)]),
        stream("D", 0.0, [at_tick(3), at_tick(4)]),
        rejected("E", 0.0),
        rejected("F", 0.0),
    )


@dataclass
class _Live:
    request_id: str
    arrival_tick: int
    num_outputs: int = 0
    last_emission_s: float | None = None


def least_slack_tick_oracle(
    arrival_ticks: Sequence[tuple[str, int]], *, max_live: int | None, num_outputs: int = 2
) -> EventLog:
    """Derive a 0x07 log: one prompt unit + (num_outputs - 1) decode units per
    request, 2 rows per 10 ms tick, least predicted slack, tie-break
    (next token first, arrival, request id), optional live cap at arrival."""
    model = FixedIterationCost(TICK_S * 1000)
    events: list[Event] = []
    live: dict[str, _Live] = {}
    pending = sorted(arrival_ticks, key=lambda item: (item[1], item[0]))
    tick = 0
    while pending or live:
        now_s = at_tick(tick)
        while pending and pending[0][1] == tick:
            request_id, _ = pending.pop(0)
            events.append(ArrivalEvent(now_s, request_id, num_prompt_tokens=1))
            if max_live is not None and len(live) >= max_live:
                events.append(RejectEvent(now_s, request_id, reason="max_live"))
                continue
            events.append(AdmitEvent(now_s, request_id))
            live[request_id] = _Live(request_id, tick)
        chosen = sorted(live.values(), key=lambda item: _priority(item, now_s, model))[
            :ROWS_PER_TICK
        ]
        done_s = at_tick(tick + 1)
        for item in chosen:
            if item.num_outputs == 0:
                events.append(ComputeEvent(done_s, item.request_id, num_rows=1))
                events.append(FirstTokenEvent(done_s, item.request_id))
            else:
                events.append(TokenEvent(done_s, item.request_id, token_index=item.num_outputs))
            item.num_outputs += 1
            item.last_emission_s = done_s
            if item.num_outputs == num_outputs:
                events.append(
                    FinishEvent(
                        done_s, item.request_id, reason="eos", num_output_tokens=num_outputs
                    )
                )
                del live[item.request_id]
        tick += 1
    return merged(events)


def _priority(item: _Live, now_s: float, model: FixedIterationCost) -> tuple[float, int, int, str]:
    estimate = predicted_slack(
        now_s,
        arrival_s=at_tick(item.arrival_tick),
        last_emission_s=item.last_emission_s,
        num_outputs_emitted=item.num_outputs,
        num_prompt_rows_remaining=0 if item.num_outputs else 1,
        slo=BURST_SLO,
        cost_model=model,
    )
    # Slack is quantized to 1 ns so that float noise cannot break a declared tie.
    is_waiting = 1 if item.num_outputs == 0 else 0
    return (round(estimate.slack_s, 9), is_waiting, item.arrival_tick, item.request_id)


def saturation_arrivals() -> list[tuple[str, int]]:
    """240 requests, two per 10 ms tick over ticks 0..119 (the first 1.2 s of W=1.3 s)."""
    return [(f"r{2 * tick + slot:03d}", tick) for tick in range(120) for slot in range(2)]
