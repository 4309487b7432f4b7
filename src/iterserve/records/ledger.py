"""Per-client service counters that travel in the state (0x09A, F52-F56).

A :class:`ClientLedger` is part of :class:`SchedulerState` when the run's
policy declares service weights (``ledger_weights``), so every client-fair
policy decides from published state only and replay stays exact. It holds
two families of counters, both divided by the client weight phi_i:

- ``done`` (W_done): authoritative weighted service, published only from
  completed intervals of validated results: w_p per completed prompt row,
  w_q per emitted output; rebuild rows and failed or planned work earn 0
  (F52, F53, 0x0C).
- ``counters`` (VTC Algorithm 2): w_p * prompt length charged when a fresh
  request joins the running batch (its ADMIT is applied, whatever its first
  interval's fate), w_q per generated output, and a client that becomes
  active is lifted to the minimum counter of the other active clients, or
  to the last departing client's counter when none is active (F56).

Active = has a live request (waiting, running or suspended). For the
starvation guard (F63) the ledger also keeps, per client, when it last
became active, when it last completed a service event, and when it could
last have become eligible again after being blocked: a client whose live
requests all wait on foreign readiness (remote K/V, promotion, layers,
0x09B/0x0C) is not ready scheduler work, so its eligibility interval
restarts when it is unblocked (``eligible_from``; ``blocked`` holds the
clients blocked at the last published decision).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from iterserve.records import frontier
from iterserve.records.spec import FairnessSpec
from iterserve.records.view import RequestView


@dataclass(frozen=True, slots=True)
class ClientLedger:
    weights: FairnessSpec
    counters: Mapping[str, float] = field(default_factory=dict)
    done: Mapping[str, float] = field(default_factory=dict)
    last_departed: float = 0.0
    active_since: Mapping[str, float] = field(default_factory=dict)
    last_served: Mapping[str, float] = field(default_factory=dict)
    eligible_from: Mapping[str, float] = field(default_factory=dict)
    blocked: frozenset[str] = frozenset()

    def counter(self, client_id: str) -> float:
        return self.counters.get(client_id, 0.0)

    def done_of(self, client_id: str) -> float:
        return self.done.get(client_id, 0.0)

    def unserved_for(self, client_id: str, now: float) -> float:
        """How long an active client has been continuously eligible without a
        completed event (F63): from the latest of becoming active, its last
        completed event and the end of its last blocked stretch."""
        since = max(self.active_since.get(client_id, now),
                    self.last_served.get(client_id, -math.inf),
                    self.eligible_from.get(client_id, -math.inf))
        return now - since

    def to_json(self) -> dict[str, object]:
        spec = self.weights
        return {"prompt_weight": spec.prompt_weight, "output_weight": spec.output_weight,
                "client_weights": dict(spec.client_weights),
                "counters": dict(sorted(self.counters.items())),
                "done": dict(sorted(self.done.items())), "last_departed": self.last_departed,
                "active_since": dict(sorted(self.active_since.items())),
                "last_served": dict(sorted(self.last_served.items())),
                # only once a client was blocked: older logs' states keep their bytes
                **({"eligible_from": dict(sorted(self.eligible_from.items())),
                    "blocked": sorted(self.blocked)}
                   if self.eligible_from or self.blocked else {})}


def counter_spread(ledger: ClientLedger, clients: Iterable[str]) -> float:
    """max_i c_i - min_i c_i over ``clients`` (F58's left side); 0 for fewer
    than two."""
    counters = [ledger.counter(client) for client in clients]
    return max(counters) - min(counters) if len(counters) > 1 else 0.0


def interval_cost(weights: FairnessSpec, view: RequestView, start: int, end: int) -> float:
    """Weighted service of interval [start, end) of ``view`` if it completes:
    prompt rows at w_p (rebuild rows earn 0), w_q when it emits (0x01A)."""
    p, e = view.num_prompt_tokens, view.num_emitted
    kind = frontier.next_kind(p, e, start)
    cost = 0.0
    if kind is frontier.PREFILL:
        cost = weights.prompt_weight * frontier.service_rows(kind, start, end)
    if frontier.emits(kind, p, end):
        cost += weights.output_weight
    return cost / weights.client_weight(view.client_id)


def blocked_clients(views: Mapping[str, RequestView], live: Iterable[str]) -> set[str]:
    """Clients with live requests none of which is ready: blocked on foreign
    readiness, not eligible (F63)."""
    clients: dict[str, bool] = {}
    for rid in live:
        view = views[rid]
        clients[view.client_id] = clients.get(view.client_id, False) or view.is_ready
    return {client for client, ready in clients.items() if not ready}


def lift(ledger: ClientLedger, active: set[str], arriving: Iterable[str],
         now: float) -> ClientLedger:
    """Lift each client that becomes active (in arrival order) to the minimum
    counter of the clients already active, else to the last departed (F56).

    Arrivals published at a later ``now`` (the clock crossed an idle gap)
    move the eligibility of the clients still blocked at the last decision
    to ``now``: no decision saw them unblocked in the gap."""
    counters = dict(ledger.counters)
    since = dict(ledger.active_since)
    if ledger.blocked:
        ledger = replace(ledger, eligible_from={
            **ledger.eligible_from, **{c: max(now, ledger.eligible_from.get(c, now))
                                       for c in ledger.blocked if c in active}})
    active = set(active)
    for client in arriving:
        if client in active:
            continue
        floor = min(counters.get(c, 0.0) for c in active) if active else ledger.last_departed
        counters[client] = max(counters.get(client, 0.0), floor)
        since[client] = now
        active.add(client)
    return replace(ledger, counters=counters, active_since=since)


@dataclass(frozen=True, slots=True)
class Charge:
    """One published fact's charge: ``joined`` (prompt at join, VTC only),
    else a completed interval [start, end) of ``view``."""

    view: RequestView
    start: int = 0
    end: int = 0
    joined: bool = False


def charge(ledger: ClientLedger, charges: Iterable[Charge], active_before: set[str],
           active_after: set[str], now: float, blocked: Iterable[str] = ()) -> ClientLedger:
    """Apply one step's joins and completed intervals (published at ``now``),
    then record the last departed counter (the largest, if several leave).
    ``blocked``: the clients blocked on foreign readiness throughout the
    step (at its input cut); none can have been eligible before ``now``."""
    weights = ledger.weights
    counters, done = dict(ledger.counters), dict(ledger.done)
    served = dict(ledger.last_served)
    for item in charges:
        client = item.view.client_id
        if item.joined:
            phi = weights.client_weight(client)
            amount = weights.prompt_weight * item.view.num_prompt_tokens / phi
            counters[client] = counters.get(client, 0.0) + amount
            continue
        cost = interval_cost(weights, item.view, item.start, item.end)
        done[client] = done.get(client, 0.0) + cost
        if _is_service_event(item):
            served[client] = now
        view = item.view
        if frontier.interval_emits(view.num_prompt_tokens, view.num_emitted, item.start,
                                   item.end):
            output = weights.output_weight / weights.client_weight(client)
            counters[client] = counters.get(client, 0.0) + output
    departed = active_before - active_after
    last = ledger.last_departed
    if departed:
        last = max(counters.get(client, 0.0) for client in departed)
    blocked = frozenset(blocked)
    eligible_from = dict(ledger.eligible_from)
    eligible_from.update(dict.fromkeys(blocked & active_after, now))
    for client in set(eligible_from) - active_after:  # a new stretch starts at arrival
        del eligible_from[client]
    return ClientLedger(weights, counters, done, last, ledger.active_since, served,
                        eligible_from, blocked & active_after)


def _is_service_event(item: Charge) -> bool:
    """A completed prefill chunk or an emission: not a rebuild (0x0C)."""
    view = item.view
    return frontier.interval_earns_service(view.num_prompt_tokens, view.num_emitted, item.start)
