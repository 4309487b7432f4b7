"""ORCA Algorithm 1 (0x03): iteration-level FCFS with max_tokens reservation.

Settings (:class:`OrcaConfig`): ``kv_rows`` (n_slots) and ``max_num_seqs``
(max_bs). Eligible requests are scanned in arrival order. An INITIATION request
(never scheduled: waiting) must reserve max_tokens = prompt +
max_output_tokens slots against n_slots; if that would overflow, the scan
``break``s: an older initiation request is never skipped to admit a younger
one. n_rsrv is derived from the state (the admitted, unfinished requests'
max_tokens), so the reservation is released exactly when a request leaves.
Prefill is whole-prompt, as in the paper: a prompt that does not fit the
iteration's token budget also stops the scan.
"""

from __future__ import annotations

from iterserve.plan import PlanBuilder, PolicyContract, views_of
from iterserve.policies.policy import PolicyBase
from iterserve.policies.settings import count_settings
from iterserve.records.state import SchedulerState
from iterserve.records.view import Lifecycle, RequestView


def max_tokens(view: RequestView) -> int:
    """ORCA's per-request upper bound on total tokens after processing."""
    return view.num_prompt_tokens + view.max_output_tokens


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
    """)

    def ledgers(self) -> dict[str, int | None]:
        return {"sequence_budget": self.config.max_num_seqs}  # max_bs

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        slots = num_slots(self.config, state)
        n_rsrv = sum(max_tokens(v) for v in views_of(state, state.running))
        pool = views_of(state, state.running) + views_of(state, state.waiting)
        for view in sorted(pool, key=lambda v: v.arrival_order):
            if builder.seqs_left == 0:
                break
            initiation = view.lifecycle is Lifecycle.WAITING
            if initiation:
                reserved = n_rsrv + max_tokens(view)
                if slots is not None and reserved > slots:
                    break
            legal = builder.legal_rows(view)
            if legal > builder.tokens_left:
                break  # whole-prompt prefill does not fit this iteration
            granted = builder.take(view)
            if granted == 0:
                break
            if initiation:
                n_rsrv = reserved
