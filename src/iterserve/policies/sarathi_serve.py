"""Sarathi-Serve stall-free scheduling (Algorithm 3; Agrawal et al. 2024).

With token budget tau (setting ``tau``, else the iteration token budget):
1. every running decode gets its row (KV shortfall preempts the latest
   arrival, as the vLLM base it is built on does);
2. ongoing partial prefills get min(remaining, tau - n_t);
3. new requests are admitted last, chunked to the leftover, while tau and
   memory allow.
Decodes are never paused behind a long prefill while tau covers them.
"""

from __future__ import annotations

from iterserve.plan import PlanBuilder, PolicyContract, views_of
from iterserve.plan.feasibility import RunningSet
from iterserve.plan.kept_order import KeptOrder, in_arrival_order
from iterserve.plan.passes import resume_then_admit, running_pass
from iterserve.plan.victims import fcfs_victim
from iterserve.policies.policy import PolicyBase
from iterserve.policies.settings import count_settings
from iterserve.records.state import SchedulerState
from iterserve.records.view import RequestView


@count_settings
class SarathiServeConfig:
    """``tau``: the token budget (else the iteration's); ``max_num_seqs``:
    the running cap (else the sequence budget)."""

    tau: int | None = None
    max_num_seqs: int | None = None


class SarathiServe(PolicyBase[SarathiServeConfig]):
    policy_id = "sarathi-serve"
    running_set = RunningSet.PREEMPTS
    tie_break_key: tuple[str, ...] = ("phase_rank", "queue_rank", "arrival_order",
                                      "request_id", "request_generation")
    contract = PolicyContract.parse("""
        granularity: iteration, token interval
        protected_identity: request_id + generation + snapshot_version
        visible_state: running decodes, partial prefills, waiting queue, KV capacity facts
        decision_output: all decodes, then partial prefill, then admissions under tau
        unknown_future: output lengths
        objective: stall-free decodes under a TBT-derived token budget tau
        metric: TBT/TPOT and capacity under SLO
        assumptions: tau profiled offline for the TBT SLO
        foreign_owners: KV allocator (capacity facts)
        source: Agrawal et al., Sarathi-Serve (OSDI 2024), Algorithm 3
        denominator: P99 TBT over decode tokens; capacity = highest load meeting the SLO
        premises: tau from an offline profile for the TBT SLO; decodes fit tau
        evidence_class: simulated or measured here (iterserve); never source-reported
        source_version: Agrawal et al., Sarathi-Serve, OSDI 2024, Algorithm 3
        non_claims: no capacity or P99 TBT figure reproduced; tau here is a setting, not a profile
    """)

    keeps_order = True  # the waiting queue in arrival order, kept across decisions

    def __init__(self, config: SarathiServeConfig | None = None) -> None:
        super().__init__(config)
        self.kept_waiting = KeptOrder(ready_only=False)

    def ledgers(self) -> dict[str, int | None]:
        return {"max_num_batched_tokens": self.config.tau, "max_running": self.config.max_num_seqs}

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        running = sorted(views_of(state, state.running), key=lambda v: v.arrival_order)
        done = running_pass(builder, running, _one_row, fcfs_victim, skip=_is_prefilling)
        for view in done.queue:  # ongoing partial prefills get what tau leaves
            if not view.is_decoding and builder.can_add():
                builder.add(view)
        if not done.gone:
            waiting = in_arrival_order(self.kept_waiting, state)
            resume_then_admit(builder, state, waiting)


def _one_row(view: RequestView) -> int:
    return 1


def _is_prefilling(view: RequestView) -> bool:
    return not view.is_decoding
