"""SARATHI decode-maximal batching (0x09; Agrawal et al. 2023).

One prefill chunk of size C (setting ``chunk_size``) anchors the iteration:
the oldest request with prefill (or rebuild) work left, running first, else
the oldest waiting request. Decodes piggyback in the remaining request slots
and token rows, oldest first. With no prefill work the batch is decode-only.
"""

from __future__ import annotations

from iterserve.plan import PlanBuilder, PolicyContract, views_of
from iterserve.plan.kept_order import KeptOrder, in_arrival_order
from iterserve.policies.policy import PolicyBase
from iterserve.policies.settings import count_settings
from iterserve.records.state import SchedulerState


@count_settings
class SarathiConfig:
    """``chunk_size``: C, the prefill rows of the anchoring chunk (required)."""

    chunk_size: int


class Sarathi(PolicyBase[SarathiConfig]):
    policy_id = "sarathi"
    tie_break_key: tuple[str, ...] = ("phase_rank", "arrival_order", "request_id",
                                      "request_generation")
    contract = PolicyContract.parse("""
        granularity: iteration; one prefill chunk per hybrid batch
        protected_identity: request_id + generation + snapshot_version
        visible_state: frontiers, arrival order, request slots
        decision_output: one chunk of C prefill rows + piggybacked decode rows
        unknown_future: output lengths
        objective: decode-maximal hybrid batches (throughput, fewer pipeline bubbles)
        metric: throughput; P:D = C / (B - 1)
        assumptions: C profiled offline for the model and hardware
        foreign_owners: KV capacity (B_paper is a paper approximation)
        source: Agrawal et al., SARATHI (2023): chunked-prefills + decode-maximal batching
        denominator: generated tokens per second; P:D per hybrid batch
        premises: C saturates compute for the model and hardware (offline profile); one chunk per batch
        evidence_class: simulated or measured here (iterserve); never source-reported
        source_version: Agrawal et al., SARATHI, arXiv 2308.16369 (2023)
        non_claims: no pipeline-bubble or throughput figure reproduced; C here is a setting, not a profile
    """)

    keeps_order = True  # the waiting queue in arrival order, kept across decisions

    def __init__(self, config: SarathiConfig | None = None) -> None:
        super().__init__(config)
        self.kept_waiting = KeptOrder(ready_only=False)

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        # followed at every decision, read only when a request joins
        waiting = in_arrival_order(self.kept_waiting, state)
        chunk = self.config.chunk_size
        running = sorted(views_of(state, state.running), key=lambda v: v.arrival_order)
        anchor = next((v for v in running if not v.is_decoding and v.is_ready), None)
        if anchor is not None:
            builder.add(anchor, chunk)
        else:
            for view in waiting:
                if view.is_ready and builder.admit(view, chunk):
                    break
                if not builder.fits_memory(view, min(chunk, builder.legal_rows(view))):
                    break
        for view in running:
            if not builder.can_add():
                break
            if view.is_decoding:
                builder.add(view)
