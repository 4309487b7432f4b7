"""The queue-ordering policies as they were before they kept their waiting
order: every decision re-reads and re-sorts every waiting view (an oracle,
DESIGN rule 9). ``least-slack`` here ranks by slack itself (deadline -
(now + predicted cost)), the formula the product replaced by the latest
start; ``mlfq`` and ``priority-aging`` sort stably by their published keys
(queue, arrival order) and (p_eff, arrival order), ties left to the queue.

:func:`reference_schedule` gives each policy's old rule; the tests build a
plan with it on the same policy object and compare it with the product's.
The FCFS policies (sarathi-serve, sarathi, static, orca) are checked
against themselves with the waiting order re-read at every decision.
``vtc-completed`` sorts every live view into per-client lists and tries
each in turn. ``priority`` and ``least-service`` sort every waiting view by their
tie-break key; ``vllm-priority`` sorts the whole waiting queue, ready or
not, by (priority, arrival, arrival order).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator

from iterserve.cost import FixedIterationCost, default_cost_model
from iterserve.metrics.slack import exclusive_endpoint_cost_s, predicted_slack
from iterserve.metrics.slo import SloConfig
from iterserve.plan import PlanBuilder, views_of
from iterserve.plan.builder import iter_views
from iterserve.plan.kept_order import KeptOrder
from iterserve.plan.passes import resume_suspended
from iterserve.plan.victims import add_or_preempt, least_urgent_victim
from iterserve.policies.deadline import DeadlineOrderedPolicy
from iterserve.policies.deadline_clock import DecisionClock, deadline_s, seconds_per_unit
from iterserve.policies.edf import EarliestDeadlineFirst
from iterserve.policies.least_service import LeastService
from iterserve.policies.least_slack import LeastSlack
from iterserve.policies.mlfq import Mlfq, MlfqConfig
from iterserve.policies.orca import Orca
from iterserve.policies.ordered import schedule_ordered
from iterserve.policies.priority import StaticPriority
from iterserve.policies.priority_aging import PriorityAging
from iterserve.policies.sarathi import Sarathi
from iterserve.policies.sarathi_serve import SarathiServe
from iterserve.policies.static import StaticBatching
from iterserve.policies.vllm import VllmPriority
from iterserve.policies.vtc import Vtc
from iterserve.policies.vtc_completed import VtcCompleted, _take
from iterserve.records.keys import key_function
from iterserve.records.ledger import ClientLedger, interval_cost
from iterserve.records.plan import IterationPlan
from iterserve.records.state import SchedulerState
from iterserve.records.view import Lifecycle, RequestView

Schedule = Callable[[object, PlanBuilder, SchedulerState], None]


def schedule_ranked(builder: PlanBuilder, ranked: list[RequestView]) -> None:
    """The ranked pass over one list of every live request."""
    victims = [view for view in ranked
               if view.lifecycle is Lifecycle.RUNNING and not builder.is_aborted(view)]
    gone: set[str] = set()
    for view in ranked:
        if not builder.can_add():
            break
        if view.request_id in gone or builder.is_aborted(view):
            continue
        if view.lifecycle is Lifecycle.WAITING:
            builder.admit(view)
        elif view.lifecycle is not Lifecycle.RUNNING:
            builder.resume(view)
        else:
            rows = builder.rows_within_tokens(view)
            if not add_or_preempt(builder, view, rows, victims, gone, least_urgent_victim):
                break


def slack_s(view: RequestView, clock: DecisionClock) -> float:
    """Predicted slack at ``clock.now_s`` (least-slack's old urgency)."""
    slo = view.slo
    if slo is None or (slo.ttft_ms is None and slo.tbt_ms is None):
        return float("inf")
    seconds = clock.seconds_per_unit
    last = view.last_output_time
    estimate = predicted_slack(
        clock.now_s, arrival_s=view.arrival * seconds,
        last_emission_s=None if last is None else last * seconds,
        num_outputs_emitted=view.num_emitted,
        num_prompt_rows_remaining=view.remaining_rows if view.is_prefill else 0,
        slo=SloConfig(ttft_ms=slo.ttft_ms, tbt_ms=slo.tbt_ms), cost_model=clock.cost_model,
        max_prefill_rows_per_iteration=clock.max_prefill_rows)
    if not view.is_rebuilding:
        return estimate.slack_s
    return estimate.slack_s - exclusive_endpoint_cost_s(
        clock.cost_model, num_outputs_emitted=0, num_prompt_rows_remaining=view.remaining_rows,
        max_prefill_rows_per_iteration=clock.max_prefill_rows)


def deadline_schedule(policy: DeadlineOrderedPolicy, builder: PlanBuilder,
                      state: SchedulerState) -> None:
    seconds = seconds_per_unit(state.rules.clock, policy.cost_model, policy.policy_id)
    clock = DecisionClock(state.now * seconds, seconds,
                          policy.cost_model or default_cost_model(state.rules.clock),
                          state.max_num_batched_tokens)
    key_of = key_function(policy.tie_break_key, state)
    live = [view for view in views_of(state, state.running + state.suspended + state.waiting)
            if view.is_ready]
    if isinstance(policy, LeastSlack):
        def urgency(view: RequestView) -> float:
            return slack_s(view, clock)
    else:
        def urgency(view: RequestView) -> float:
            return deadline_s(view, view.slo, seconds)
    ranks = {view.request_id: (round(urgency(view), 9), *key_of(view)) for view in live}
    live.sort(key=lambda view: ranks[view.request_id])
    schedule_ranked(builder, live)


def mlfq_schedule(policy: Mlfq, builder: PlanBuilder, state: SchedulerState) -> None:
    live = views_of(state, state.running + state.suspended + state.waiting)
    ranked = sorted((view for view in live if view.is_ready), key=lambda view: (
        mlfq_queue(policy.config, view, state), view.arrival_order))
    schedule_ranked(builder, ranked)


def mlfq_queue(config: MlfqConfig, view: RequestView, state: SchedulerState) -> int:
    """FastServe's Algorithm 1 run by hand over the job's service, one
    iteration at a time: promoted (unserved for alpha) in Q_1, else skip-join
    by the first prompt chunk and, whenever a queue's quantum is used up,
    demotion to the first lower queue whose quantum covers the next
    iteration (the spend starting afresh there)."""
    model = config.cost_model or FixedIterationCost(1000.0)

    def ms(prefill_rows: int, decode_rows: int) -> float:
        return model.predict_iteration_s(prefill_rows, decode_rows) * 1000.0

    if state.rules.clock == "ms":
        ms_per_unit = 1.0
    else:
        ms_per_unit = 1000.0 if config.cost_model is None else ms(0, 0)
    last = view.arrival if view.last_output_time is None else view.last_output_time
    if (state.now - last) * ms_per_unit >= config.alpha_ms:
        return 0
    quanta = [config.base_quantum_ms * 2 ** j for j in range(config.num_queues)]
    bottom = len(quanta) - 1

    def covering(time_ms: float, start: int) -> int:
        return next((j for j in range(start, bottom) if quanta[j] >= time_ms), bottom)

    budget, prompt = state.max_num_batched_tokens, view.num_prompt_tokens
    iterations = _served_iterations(view, budget, ms)
    served = prompt if view.num_emitted else min(view.num_computed, prompt)
    after = ms(min(prompt - served, budget), 0) if served < prompt else ms(0, 1)
    queue = covering(ms(min(prompt, budget), 0), 0)
    # the spend in the current queue: spent_before + same * same_ms, where
    # same counts the latest iterations of equal time same_ms
    spent_before, same = 0.0, 0
    same_ms: float | None = None
    for index, time_ms in enumerate(iterations):
        if queue == bottom:
            break
        if time_ms != same_ms:
            spent_before += same * same_ms if same_ms is not None else 0.0
            same, same_ms = 0, time_ms
        same += 1
        if spent_before + same * time_ms >= quanta[queue]:
            following = iterations[index + 1] if index + 1 < len(iterations) else after
            queue = max(covering(following, queue + 1), queue + 1)
            spent_before, same, same_ms = 0.0, 0, None
    return min(queue, bottom)


def _served_iterations(view: RequestView, budget: int, ms: Callable[[int, int], float]
                       ) -> list[float]:
    """The iterations' predicted ms: the served prompt rows in chunks of the
    budget from row 0, then one decode row per output after the first (a
    rebuild serves nothing)."""
    prompt = view.num_prompt_tokens
    served = prompt if view.num_emitted else min(view.num_computed, prompt)
    chunks = [ms(min(budget, served - start), 0) for start in range(0, served, budget)]
    return chunks + [ms(0, 1)] * max(view.num_emitted - 1, 0)


def vtc_schedule(policy: Vtc, builder: PlanBuilder, state: SchedulerState) -> None:
    key = key_function(policy.tie_break_key, state)
    ledger = state.ledger or ClientLedger(policy.ledger_weights)
    schedule_ordered(builder, state, lambda views: sorted(views, key=key),
                     lambda views: _min_counter_picks(list(views), ledger))


def _min_counter_picks(waiting: list[RequestView], ledger: ClientLedger) -> Iterator[RequestView]:
    weights = ledger.weights
    queues: dict[str, list[RequestView]] = {}
    for view in sorted(waiting, key=lambda v: v.arrival_order):
        queues.setdefault(view.client_id, []).append(view)
    counters = {client: ledger.counter(client) for client in queues}
    while queues:
        client = min(queues, key=lambda c: (counters[c], c))
        view = queues[client].pop(0)
        if not queues[client]:
            del queues[client]
        yield view
        counters[client] += weights.prompt_weight * view.num_prompt_tokens / (
            weights.client_weight(client))


def aging_schedule(policy: PriorityAging, builder: PlanBuilder, state: SchedulerState) -> None:
    def order(views: object) -> list[RequestView]:
        return sorted(views, key=lambda v: (  # type: ignore[call-overload]
            policy.effective_priority(v, state.now), v.arrival_order))

    schedule_ordered(builder, state, order, order)


def key_sort_schedule(policy: StaticPriority | LeastService, builder: PlanBuilder,
                      state: SchedulerState) -> None:
    """Running, then ready waiting views, each sorted by the tie-break key."""
    key = key_function(policy.tie_break_key, state)
    schedule_ordered(builder, state, lambda views: sorted(views, key=key),
                     lambda views: sorted(views, key=key))


def vllm_priority_schedule(policy: VllmPriority, builder: PlanBuilder,
                           state: SchedulerState) -> None:
    """vLLM's PRIORITY pass with every waiting view sorted at each decision."""
    clone = copy.copy(policy)
    clone.waiting_order = lambda state: sorted(  # type: ignore[method-assign]
        iter_views(state, state.waiting), key=lambda v: (v.priority, v.arrival, v.arrival_order))
    type(policy).schedule(clone, builder, state)


def vtc_completed_schedule(policy: VtcCompleted, builder: PlanBuilder,
                           state: SchedulerState) -> None:
    """Every ready live request in its client's list, each tried in turn."""
    ledger = state.ledger or ClientLedger(policy.ledger_weights)
    resume_suspended(builder, state)
    queues: dict[str, list[RequestView]] = {}
    live = views_of(state, state.running) + views_of(state, state.waiting)
    for view in sorted(live, key=lambda v: v.arrival_order):
        if view.is_ready and not builder.is_chosen(view.request_id):
            queues.setdefault(view.client_id, []).append(view)
    c_select = {client: ledger.done_of(client) for client in queues}
    victims = sorted(views_of(state, state.running),
                     key=lambda v: (ledger.done_of(v.client_id), v.arrival_order))
    gone: set[str] = set()
    while queues and builder.can_add():
        client = min(queues, key=lambda c: (c_select[c], c))
        view = queues[client].pop(0)
        if not queues[client]:
            del queues[client]
        rows = 0 if view.request_id in gone else _take(builder, view, victims, gone)
        if rows:
            start = view.num_computed
            c_select[client] += interval_cost(ledger.weights, view, start, start + rows)


def guard_oldest_starving(horizon: float, state: SchedulerState) -> list[RequestView]:
    """The starvation guard's pick read off every live request: per client
    whose ready work has waited ``horizon`` unserved, its oldest ready live
    request, most starved first."""
    ledger = state.ledger
    if ledger is None:
        return []
    oldest: dict[str, RequestView] = {}
    for view in views_of(state, state.running + state.suspended + state.waiting):
        held = oldest.get(view.client_id)
        if view.is_ready and (held is None or view.arrival_order < held.arrival_order):
            oldest[view.client_id] = view
    unserved = {client: ledger.unserved_for(client, state.now) for client in oldest}
    starving = sorted((c for c in oldest if unserved[c] >= horizon), key=lambda c: (-unserved[c], c))
    return [oldest[client] for client in starving]


def reread_schedule(policy: object, builder: PlanBuilder, state: SchedulerState) -> None:
    """The FCFS policies' rule with their waiting order read afresh (every
    waiting view, sorted by arrival order, then id and generation)."""
    clone = copy.copy(policy)
    clone.kept_waiting = KeptOrder(ready_only=False)  # type: ignore[attr-defined]
    type(policy).schedule(clone, builder, state)  # type: ignore[attr-defined]


REFERENCES: dict[type, Schedule] = {
    SarathiServe: reread_schedule,
    Sarathi: reread_schedule,
    StaticBatching: reread_schedule,
    Orca: reread_schedule,
    EarliestDeadlineFirst: deadline_schedule,  # type: ignore[dict-item]
    LeastSlack: deadline_schedule,  # type: ignore[dict-item]
    Mlfq: mlfq_schedule,  # type: ignore[dict-item]
    Vtc: vtc_schedule,  # type: ignore[dict-item]
    PriorityAging: aging_schedule,  # type: ignore[dict-item]
    StaticPriority: key_sort_schedule,  # type: ignore[dict-item]
    LeastService: key_sort_schedule,  # type: ignore[dict-item]
    VllmPriority: vllm_priority_schedule,  # type: ignore[dict-item]
    VtcCompleted: vtc_completed_schedule,  # type: ignore[dict-item]
}


def reference_choose(policy: object, state: SchedulerState) -> IterationPlan:
    """``policy``'s plan for ``state`` by its old, full-sort rule."""
    schedule = REFERENCES[type(policy)]
    builder = PlanBuilder(policy, state, **policy.ledgers())  # type: ignore[arg-type, attr-defined]
    schedule(policy, builder, state)
    return builder.build()
