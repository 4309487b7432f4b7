"""FastServe skip-join MLFQ (0x09A, F54, F55): job liveness, not client shares.

Queues Q_1..Q_m have geometric quanta q_j = base * 2^(j-1) (F54) in ms of
the run's cost model. A job's queue is derived from published state only
(:mod:`iterserve.policies.mlfq_levels` defines it exactly):

skip-join (F55) into j_0 = min{j : q_j >= t_init} (t_init: the predicted
first iteration, a chunk of min(prompt, token budget) rows); its completed
service, replayed as prompt chunks of the token budget then decode rows,
spends each queue's quantum, the excess not carried; a job that depletes
q_p is demoted by FastServe's next-iteration-aware distance eta to
min(p + eta, m), the first queue below p whose quantum covers the
predicted time of its next iteration (a prompt chunk of min(remaining
prompt, budget) rows, or a decode row); a rebuild earns no service and
moves no queue. promotion: unserved for alpha (since its last output, or
arrival), it sits in Q_1 until served, then back in its replayed queue.
Each iteration ranks every live request by (queue, arrival order, request
id, generation); a lower-queue running job is preempted through the shared
mechanism on a KV shortfall. A chunked prefill counts as unserved until its
first output.

The waiting requests are kept across decisions in arrival order, by their
promotion clock and by their replayed queue
(:class:`~iterserve.plan.kept_order.KeptOrder`): those unserved for alpha
are all in Q_1 and the others in their replayed queue, so a decision
ranks the fewer of the two groups itself and walks the kept order of the
other.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter

from iterserve.cost import FixedIterationCost, IterationCostModel
from iterserve.plan import PlanBuilder, PolicyContract, views_of
from iterserve.plan.feasibility import RunningSet
from iterserve.plan.kept_order import KeptOrder, KeptRanks
from iterserve.plan.passes import schedule_ranked
from iterserve.policies.mlfq_levels import Quanta, ReplayPrices, attained_level
from iterserve.policies.policy import PolicyBase
from iterserve.policies.settings import PolicyConfigError, check_count
from iterserve.records.state import SchedulerState
from iterserve.records.time_units import MS_PER_S
from iterserve.records.view import RequestView


@dataclass(frozen=True, slots=True)
class MlfqConfig:
    """m queues, q_1 in ms, the promotion wait alpha (FastServe's source-reported
    300 ms default); ``cost_model`` bound from the run (None: 1 s/iteration)."""

    num_queues: int = 4
    base_quantum_ms: float = 1.0
    alpha_ms: float = 300.0
    cost_model: IterationCostModel | None = None

    def __post_init__(self) -> None:
        check_count("num_queues", self.num_queues)
        for name in ("base_quantum_ms", "alpha_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not (math.isfinite(value) and value > 0):
                raise PolicyConfigError(f"setting {name}: must be finite and > 0, got {value!r}")

    @property
    def quanta(self) -> Quanta:
        return Quanta(self.base_quantum_ms, self.num_queues)

    def quantum_ms(self, level: int) -> float:
        return self.quanta.quantum_ms(level)


class Mlfq(PolicyBase[MlfqConfig]):
    policy_id = "mlfq"
    policy_version = "2"  # demotion by the next iteration (eta), not by carried-over attained cost
    running_set = RunningSet.PREEMPTS  # the shared preemption step (plan.victims)
    keeps_order = True  # the waiting queue's order is kept across decisions
    tie_break_key: tuple[str, ...] = ("arrival", "arrival_order", "request_id",
                                      "request_generation")
    contract = PolicyContract(
        granularity="iteration; job (request) preemption at token boundaries",
        protected_identity="request (job); no client identity",
        visible_state="frontiers, arrival and last output time, the run's cost model",
        decision_output="batch in (queue, arrival) order; admissions; shared preemption",
        unknown_future="output lengths (queues approximate shortest-remaining first)",
        objective="reduce head-of-line blocking; promotion keeps every job live",
        metric="job completion time; starvation count (0x09A F63)",
        assumptions="0x09A: identity job; eligible while live and ready; cost: predicted "
                    "iteration time; publication: completed iterations; guarantee: job liveness "
                    "by promotion. Queues derived from published state: completed service "
                    "replayed as budget-sized prompt chunks then decode rows, each queue's "
                    "quantum spent by whole iterations (excess not carried); a rebuild moves "
                    "no queue; a promoted job returns to its replayed queue after service. "
                    "skip-join by predicted first-iteration cost; geometric quanta; demotion "
                    "by next-iteration-aware distance eta (first lower queue covering the "
                    "predicted next iteration); promotion to Q_1 after alpha; proves no bound "
                    "on weighted service between clients",
        foreign_owners="KV allocator (capacity facts); whether preempted KV is kept (M5.5)",
        source="FastServe (Wu et al.), skip-join MLFQ Algorithm 1; spec 0x09A",
        denominator="per job (completion time, TTFT)",
        premises="skip-join by the profiled first-iteration cost; geometric quanta; demotion "
                 "by the predicted next iteration (eta); alpha",
        evidence_class="simulated or measured here (iterserve); never source-reported",
        source_version="FastServe (Wu et al., arXiv 2305.05920), Algorithm 1",
        non_claims="FastServe's latency results are not reproduced; no client-service bound; "
                   "preempted KV handling (M5.5) is the run's, not FastServe's",
    )

    def __init__(self, config: MlfqConfig | None = None) -> None:
        super().__init__(config)
        self.kept_fifo = KeptOrder()  # waiting, in arrival order
        self.kept_by_last_service = KeptOrder()  # waiting, by the promotion clock
        self.kept_by_attained = KeptOrder()  # waiting, by (replayed queue, arrival order)
        self.quanta = self.config.quanta

    def with_cost_model(self, cost_model: IterationCostModel) -> Mlfq:
        return type(self)(dataclasses.replace(self.config, cost_model=cost_model))

    def _cost_ms(self, num_prefill_rows: int, num_decode_rows: int) -> float:
        model = self.config.cost_model or FixedIterationCost(MS_PER_S)
        return model.predict_iteration_s(num_prefill_rows, num_decode_rows) * MS_PER_S

    def replay_prices(self, max_num_batched_tokens: int) -> ReplayPrices:
        """The predicted iteration times the queues are derived from."""
        return ReplayPrices(self._cost_ms, max_num_batched_tokens)

    def queue_level(self, view: RequestView, state: SchedulerState, ms_per_unit: float,
                    prices: ReplayPrices | None = None) -> int:
        """0-based queue of ``view`` at this cut (see the module docstring)."""
        if self._is_promoted(_last_service(view), state.now, ms_per_unit):
            return 0  # promoted: waited alpha
        return self._attained_level(view, prices or self.replay_prices(
            state.max_num_batched_tokens))

    def _is_promoted(self, last: float, now: float, ms_per_unit: float) -> bool:
        """Unserved for alpha since ``last`` (monotone: true for every earlier ``last``)."""
        return (now - last) * ms_per_unit >= self.config.alpha_ms

    def _attained_level(self, view: RequestView, prices: ReplayPrices) -> int:
        """The queue of an unpromoted ``view``: skip-join, then next-iteration-aware
        demotion over its replayed service (a function of the view alone)."""
        return attained_level(view.num_prompt_tokens, view.num_emitted, view.num_computed,
                              self.quanta, prices)

    def schedule(self, builder: PlanBuilder, state: SchedulerState) -> None:
        ms_per_unit = _ms_per_unit(state.rules.clock, self.config.cost_model)
        max_tokens = state.max_num_batched_tokens
        prices = self.replay_prices(max_tokens)

        def rank(view: RequestView) -> tuple[object, ...]:
            return (self.queue_level(view, state, ms_per_unit, prices), *_fifo_key(view))

        def attained_rank(view: RequestView) -> tuple[object, ...]:
            return (self._attained_level(view, prices), *_fifo_key(view))

        others = [(rank(view), view) for view in views_of(state, state.running + state.suspended)
                  if view.is_ready]
        context = (self.config, state.rules.clock, ms_per_unit, max_tokens)
        for kept, key_of in ((self.kept_fifo, _fifo_key),
                             (self.kept_by_last_service, _last_service_key),
                             (self.kept_by_attained, attained_rank)):
            kept.sync(state, key_of, context)
        waiting = self._waiting_ranks(state, ms_per_unit, rank, prices, others)
        others.sort(key=itemgetter(0))
        schedule_ranked(builder, others, waiting)

    def _waiting_ranks(self, state: SchedulerState, ms_per_unit: float,
                       rank: Callable[[RequestView], tuple[object, ...]], prices: ReplayPrices,
                       others: list[tuple[tuple[object, ...], RequestView]]) -> KeptRanks:
        """The waiting part of the ranked pass. The requests unserved for
        alpha (promoted, all in Q_1) are a prefix of ``kept_by_last_service``;
        the rest keep their replayed queue. The fewer of the two are
        ranked with ``others``: the promoted ones beside the order by
        replayed queue (a burst: few waited alpha), or the unpromoted ones
        below Q_1 beside the arrival order (overload: most waited alpha)."""
        by_last, views = self.kept_by_last_service, state.views
        num_promoted = by_last.count_while(
            lambda key: self._is_promoted(key[0], state.now, ms_per_unit))
        if len(by_last) - num_promoted <= num_promoted:
            fifo = self.kept_fifo
            lower = [view for view in map(views.__getitem__, by_last.ids(num_promoted))
                     if self._attained_level(view, prices) > 0]
            others += [(rank(view), view) for view in lower]

            def before(key: tuple[object, ...]) -> int:
                return fifo.bisect(key[1:]) if key[0] == 0 else len(fifo)

            return KeptRanks(fifo, state, before, {view.request_id for view in lower})
        promoted = list(map(views.__getitem__, by_last.ids(0, num_promoted)))
        others += [((0, *_fifo_key(view)), view) for view in promoted]
        by_attained = self.kept_by_attained
        return KeptRanks(by_attained, state, by_attained.bisect,
                         {view.request_id for view in promoted})


def _last_service(view: RequestView) -> float:
    """The promotion clock's origin: last output time, else arrival."""
    return view.arrival if view.last_output_time is None else view.last_output_time


def _fifo_key(view: RequestView) -> tuple[object, ...]:
    return (view.arrival_order, view.request_id, view.generation)


def _last_service_key(view: RequestView) -> tuple[object, ...]:
    return (_last_service(view), view.request_id, view.generation)


def _ms_per_unit(clock: str, cost_model: IterationCostModel | None) -> float:
    """ms in one clock unit: 1 on the ms clock; one (fixed) iteration else."""
    if clock == "ms":
        return 1.0
    return MS_PER_S if cost_model is None else cost_model.predict_iteration_s(0, 0) * MS_PER_S
