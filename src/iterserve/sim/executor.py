"""SimulatedExecutor: completes planned intervals on a virtual clock.

It is the only online component allowed to hold :class:`HiddenTruth`: it
stops each request when its realized output length is reached (0x01A, 0x02),
or at max_output_tokens. Duration comes from an injected cost model; the
default is one unit per iteration (the ``iteration`` clock of 0x02). With a
KV residency it backs every interval with real block accounting, so
allocation can fail as a fact, exactly as on the real executor.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from itertools import compress, repeat
from operator import add, ge

from iterserve.cost import ClockedCost
from iterserve.engine.kv_residency import KvResidency
from iterserve.engine.result_builder import ResultBuilder
from iterserve.records.columns import field_columns
from iterserve.records.plan import IterationPlan, WorkItem
from iterserve.records.prefix_claims import NO_CLAIMS, PrefixClaims
from iterserve.records.result import IterationResult
from iterserve.records.spec import HiddenTruth, OnlineWorkload
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.records.transition import claimed_prefix_rows
from iterserve.records.view import FinishReason, RequestView, view_num_emitted

_STOP = FinishReason.STOP
_NO_LIMIT = sys.maxsize  # a request without a realized length stops at its max only


class SimulatedExecutor:
    def __init__(
        self,
        hidden: HiddenTruth,
        cost_model: ClockedCost | None = None,
        kv: KvResidency | None = None,
        workload: OnlineWorkload | None = None,
        plan_prefix_hits: bool = False,
    ) -> None:
        self._realized = dict(hidden.realized_output_tokens)
        self._faults = hidden.injected_failures
        self._cost = cost_model or ClockedCost.unit()
        self.kv = kv
        self._plan_prefix_hits = plan_prefix_hits
        self._prompts: dict[str, tuple[int, ...]] = {}
        if workload is not None:
            self._prompts = {r.request_id: r.prompt_token_ids for r in workload.requests
                             if r.prompt_token_ids is not None}

    @property
    def cost(self) -> ClockedCost:
        """What times each iteration (a layer-offload run reads its stalls here)."""
        return self._cost

    def claim_prefix_hits(self, state: SchedulerState) -> PrefixClaims:
        """Verified prefix hits of waiting requests, held for them (0x0E);
        only for a workload whose ``kv.plan_prefix_hits`` asks for them."""
        if self.kv is None or not self._plan_prefix_hits:
            return NO_CLAIMS
        return self.kv.claim_prefix_hits(state, self._prompts.get)

    def capacity(self) -> CapacityFacts:
        return CapacityFacts() if self.kv is None else self.kv.facts()

    def prefix_hits(self, state: SchedulerState) -> dict[str, int]:
        """Cached prompt rows a fresh allocation of each waiting request with
        prompt token ids would reuse now (read-only; F62)."""
        if self.kv is None:
            return {}
        hits = {}
        claimed = claimed_prefix_rows(state)  # a claim does not hide the cached rows
        for rid in state.waiting:
            prompt = self._prompts.get(rid)
            if prompt is not None and (rid in claimed or state.views[rid].num_computed == 0):
                rows = self.kv.manager.lookup_prefix(prompt).num_cached_rows
                if rows:
                    hits[rid] = rows
        return hits

    def execute(self, plan: IterationPlan, state: SchedulerState) -> IterationResult:
        builder = ResultBuilder(plan, state, self.kv, length_first=True, commits_rows=False)
        if (self.kv is not None and not self._prompts and not self._faults
                and not builder.failures):
            self._run_anonymous(plan, state, builder, self.kv)  # the common case
        else:
            self._run_each(plan, state, builder)
        builder.release_finished()
        return builder.build(self._cost.iteration_duration(plan, state) if plan.work else 0.0)

    def _run_anonymous(self, plan: IterationPlan, state: SchedulerState, builder: ResultBuilder,
                       kv: KvResidency) -> None:
        """Rows without token ids, no injected fault and no failed memory
        intent: back the whole plan in one KV call, then complete what ran
        in one builder call (:meth:`_run_each` does the same row by row)."""
        work = plan.work
        backed = kv.back_and_commit_rows(work)
        if all(backed):
            ran = work
        else:
            ran = tuple(compress(work, backed))
            for item, ok in zip(work, backed, strict=True):
                if not ok:
                    builder.fail(item, kv.shortfall_reason(item.request_id, item.end))
        rids = field_columns(ran)[0] if ran else ()
        views = list(map(state.views.__getitem__, rids))
        # output k has the synthetic id k; STOP once the hidden realized length is reached
        tokens = list(map(add, map(view_num_emitted, views), repeat(1)))
        reached = list(map(ge, tokens, map(self._realized.get, rids, repeat(_NO_LIMIT))))
        stops = ([_STOP if hit else None for hit in reached] if any(reached)
                 else [None] * len(reached))
        builder.complete_rows(ran, views, tokens, stops)

    def _run_each(self, plan: IterationPlan, state: SchedulerState,
                  builder: ResultBuilder) -> None:
        views, faults, realized = state.views, self._faults, self._realized
        intent_failed = builder.intent_failed if builder.failures else None
        # anonymous rows (no prompt token ids): back them without _back's call
        back = self.kv.back_and_commit if self.kv is not None and not self._prompts else None
        for work in plan.work:
            rid = work.request_id
            view = views[rid]
            if faults and (rid, plan.decision_id) in faults:
                builder.fail(work, "injected_fault")
                continue
            if intent_failed is not None and intent_failed(rid):
                builder.fail(work)
                continue
            if not (self._back(work, view) if back is None
                    else back(rid, work.generation, work.start, work.end, None)):
                builder.fail(work, "kv_allocation" if self.kv is None
                             else self.kv.shortfall_reason(rid, work.end))
                continue
            num_emitted = view.num_emitted + 1  # output k has the synthetic id k
            # STOP once the hidden realized output length is reached
            limit = realized.get(rid)
            stop = _STOP if limit is not None and num_emitted >= limit else None
            builder.complete(work, view, num_emitted, stop)

    def _back(self, work: WorkItem, view: RequestView) -> bool:
        """Back ``work``'s rows with blocks and commit them (a simulated
        interval that runs completes: its rows are written)."""
        if self.kv is None:
            return True
        tokens = None if not self._prompts else self._tokens(
            view, 0 if self.kv.key(work.request_id) is None else work.start, work.end)
        return self.kv.back_and_commit(work.request_id, work.generation, work.start, work.end,
                                       tokens)

    def _tokens(self, view: RequestView, start: int, end: int) -> Sequence[int] | None:
        """Token ids at positions [start, end): the prompt's, then synthetic
        outputs (output k has id k), so prefix caching sees real identities."""
        prompt = self._prompts.get(view.request_id)
        if prompt is None:
            return None
        p = len(prompt)
        return [prompt[i] if i < p else i - p + 1 for i in range(start, end)]

    def release(self, request_ids: Iterable[str]) -> None:
        if self.kv is not None:
            self.kv.release(request_ids)
