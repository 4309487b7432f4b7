"""ORCA Algorithm 1 (0x03): iteration-level FCFS with max_tokens reservation.

Settings (:class:`OrcaConfig`): ``kv_rows`` (n_slots) and ``max_num_seqs``
(max_bs). Eligible requests are scanned in arrival order. An INITIATION request
(never scheduled: waiting) must reserve max_tokens = prompt +
max_output_tokens slots against n_slots; if that would overflow, the scan
``break``s: an older initiation request is never skipped to admit a younger
one. n_rsrv is derived from the state (the admitted, unfinished requests'
max_tokens), so the reservation is released exactly when a request leaves;
each initiation publishes its reservation with the plan
(:class:`~iterserve.records.reservation.ReservationDecision`), which
validation checks against the state.
Prefill is whole-prompt, as in the paper: a prompt that does not fit the
iteration's token budget also stops the scan. A request whose max_tokens
exceed n_slots can never be reserved: it is aborted (``exceeds_kv_capacity``).
With n_slots at most the pool's rows the running requests can never all
wait for a block (their rows stay below the reserved total), so the scan
is the paper's. When the ``kv_rows`` setting exceeds the pool they can:
then a running request short of blocks preempts the youngest running one by
recompute (initiated again in arrival order) and no request is initiated in
that iteration, rather than a stall.
"""

from __future__ import annotations

from heapq import merge

from iterserve.plan import PlanBuilder, PolicyContract, views_of
from iterserve.plan.feasibility import RunningSet
from iterserve.plan.kept_order import KeptOrder, arrival_key, in_arrival_order
from iterserve.plan.victims import add_or_preempt, fcfs_victim
from iterserve.policies.policy import PolicyBase
from iterserve.policies.settings import count_settings
from iterserve.records.plan import IntentKind
from iterserve.records.reservation import ReservationDecision, max_tokens
from iterserve.records.state import SchedulerState
from iterserve.records.view import Lifecycle


@count_settings
class OrcaConfig:
    """``kv_rows``: n_slots (else the published KV rows); ``max_num_seqs``:
    max_bs (else the sequence budget)."""

    kv_rows: int | None = None
    max_num_seqs: int | None = None


def num_slots(config: OrcaConfig, state: SchedulerState) -> int | None:
    """n_slots: the kv_rows setting, else the published KV rows."""
    if config.kv_rows is not None:
        return config.kv_rows
    facts = state.capacity
    if facts.num_blocks_total is None:
        return None
    return facts.num_blocks_total * facts.block_size


class Orca(PolicyBase[OrcaConfig]):
    policy_id = "orca"
    running_set = RunningSet.PREEMPTS
    whole_prompt_prefill = True  # a prompt over the token budget is refused before the run
    tie_break_key: tuple[str, ...] = ("arrival_order", "request_id", "request_generation")
    contract = PolicyContract.parse("""
        granularity: iteration
        protected_identity: request_id + generation
        visible_state: pool in arrival order, phase (INITIATION/INCREMENT), max_tokens
        decision_output: batch of at most max_bs requests; n_rsrv reservation
        unknown_future: output length (bounded by max_tokens)
        objective: iteration-level FCFS without KV exhaustion
        metric: throughput and latency under FCFS
        assumptions: reserve max_tokens at initiation; whole-prompt prefill; break on overflow
        foreign_owners: KV allocator (n_slots)
        source: Yu et al., ORCA (OSDI 2022), Algorithm 1; spec 0x03
        denominator: generated tokens per second (throughput); per request (latency)
        premises: max_tokens bounds every output (the reservation needs it); n_slots covers the reservations
        evidence_class: simulated or measured here (iterserve); never source-reported
        source_version: Yu et al., ORCA, OSDI 2022, Algorithm 1
        non_claims: no selective-batching kernel, no pipeline parallelism, no reproduced ORCA figure
    """)

    keeps_order = True  # the waiting queue in arrival order, kept across decisions

    def __init__(self, config: OrcaConfig | None = None) -> None:
        super().__init__(config)
        self.kept_waiting = KeptOrder(ready_only=False)

    def ledgers(self) -> dict[str, int | None]:
        return {"max_num_seqs": self.config.max_num_seqs}  # max_bs

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        slots = num_slots(self.config, state)
        running = views_of(state, state.running)
        n_rsrv = sum(max_tokens(v) for v in running)
        queue = sorted((v for v in running if not builder.is_aborted(v)),
                       key=lambda v: v.arrival_order)
        gone: set[str] = set()
        overbooked = _is_overbooked(slots, state)
        for view in merge(sorted(running, key=arrival_key), in_arrival_order(self.kept_waiting, state),
                          key=arrival_key):
            if builder.seqs_left == 0:
                break
            if view.request_id in gone or builder.is_aborted(view):
                continue
            initiation = view.lifecycle is Lifecycle.WAITING
            if initiation:
                if slots is not None and max_tokens(view) > slots:
                    builder.abort(view)  # its reservation can never be granted
                    continue
                reserved = n_rsrv + max_tokens(view)
                if gone or (slots is not None and reserved > slots):
                    break
            legal = builder.legal_rows(view)
            if view.is_prefill and legal > builder.tokens_left:
                break  # whole-prompt prefill does not fit this iteration
            if not overbooked or initiation:
                if builder.take(view) == 0:
                    break
                if initiation:  # the reservation is a published intent of the plan
                    builder.reserve(ReservationDecision(view.request_id, view.generation,
                                                        max_tokens(view), n_rsrv, reserved,
                                                        slots))
                    n_rsrv = reserved
            else:  # short of blocks: preempt the youngest running request (recompute)
                add_or_preempt(builder, view, min(legal, builder.tokens_left), queue, gone,
                               fcfs_victim, IntentKind.PREEMPT_RECOMPUTE)
                if not builder.is_chosen(view.request_id):
                    break


def _is_overbooked(slots: int | None, state: SchedulerState) -> bool:
    """n_slots above the pool's rows: the reservation no longer keeps the
    running requests from all waiting for a block."""
    total = state.capacity.num_blocks_total
    return slots is not None and total is not None and slots > total * state.capacity.block_size
