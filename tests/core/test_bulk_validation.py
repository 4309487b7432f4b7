"""The validator's whole-plan checks agree with its item-by-item checks.

``_work_tokens_if_legal`` and ``_service_if_legal`` check a plan's work and
a result's completions fact by fact over every item at C speed; the
item-by-item loops (``_work_tokens_each``, ``_completed_service``) are the
reference that names errors. On reachable states, their plans and results,
and single mutations of either, a bulk check that accepts must give what
the loop gives without raising; a bulk check that doubts (None) leaves the
loop to decide.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from iterserve.policies.registry import policy_for, policy_names
from iterserve.records import errors as E
from iterserve.records.validate import (
    _completed_service,
    _service_if_legal,
    _validate_intents,
    _work_tokens_each,
    _work_tokens_if_legal,
)
from iterserve.records.view import FinishReason
from iterserve.sim.executor import SimulatedExecutor

from .helpers import replace
from .test_properties import MUTATIONS, PROPERTY_SETTINGS, _mutate, legal_states

RESULT_MUTATIONS = ("none", "generation", "start", "end", "shrink", "emitted", "finish",
                    "drop-finish", "duplicate", "unplanned", "drop")


def _mutate_result(result, mutation, index, delta):
    completed = list(result.completed)
    item = completed[index]
    if mutation == "generation":
        completed[index] = item._replace(generation=item.generation + delta)
    elif mutation == "start":
        completed[index] = item._replace(start=item.start + delta)
    elif mutation == "end":
        completed[index] = item._replace(end=item.end + delta)
    elif mutation == "shrink":
        completed[index] = item._replace(end=item.end - 1)
    elif mutation == "emitted":
        completed[index] = item._replace(emitted=not item.emitted)
    elif mutation == "finish":
        completed[index] = item._replace(finish_reason=FinishReason.STOP)
    elif mutation == "drop-finish":
        completed[index] = item._replace(finish_reason=None)
    elif mutation == "duplicate":
        completed.insert(index, item)
    elif mutation == "unplanned":
        completed[index] = item._replace(request_id=item.request_id + "-x")
    elif mutation == "drop":
        del completed[index]
    return replace(result, completed=tuple(completed))


def _loop_or_error(check, *args):
    try:
        return check(*args)
    except E.ContractViolation as error:
        return type(error)


@PROPERTY_SETTINGS
@given(case=legal_states(), policy_name=st.sampled_from(policy_names()),
       mutation=st.sampled_from(("none", *MUTATIONS)),
       result_mutation=st.sampled_from(RESULT_MUTATIONS),
       state_mutation=st.sampled_from(("none", "unready", "not-admitted", "leaving")),
       pick=st.integers(0, 1000),
       delta=st.sampled_from([-1, 1]), kind_pick=st.integers(0, 1))
def test_bulk_checks_accept_only_what_the_item_loops_accept(case, policy_name, mutation,
                                                            result_mutation, state_mutation,
                                                            pick, delta, kind_pick):
    online, hidden, state = case
    plan = policy_for(policy_name, online).choose(state)
    if not plan.work:
        return
    admitted, leaving = _validate_intents(state, plan)
    result = SimulatedExecutor(hidden).execute(plan, state)
    planned = {work.request_id: work for work in plan.work}
    if result.completed:
        forged_result = _mutate_result(result, result_mutation, pick % len(result.completed),
                                       delta)
        fast = _service_if_legal(state, planned, forged_result.completed)
        if fast is not None:
            assert _loop_or_error(_completed_service, state, planned,
                                  forged_result.completed) == fast
    forged = plan if mutation == "none" else _mutate(plan, mutation, pick % len(plan.work),
                                                     delta, kind_pick)
    rid = plan.work[pick % len(plan.work)].request_id
    checked_state, admitted_ids, leaving_ids = state, set(admitted), set(leaving)
    if state_mutation == "unready":  # the view loses its readiness fact, same snapshot
        views = dict(state.views)
        views[rid] = views[rid]._replace(is_ready=False)
        checked_state = replace(state, views=views)
    elif state_mutation == "not-admitted":
        admitted_ids.discard(rid)
    elif state_mutation == "leaving":
        leaving_ids.add(rid)
    tokens = _work_tokens_if_legal(checked_state, forged.work, admitted_ids, leaving_ids)
    if tokens is not None:
        assert _loop_or_error(_work_tokens_each, checked_state, forged, admitted_ids,
                              leaving_ids) == tokens
    if mutation == "none" and state_mutation == "none":
        assert tokens is not None  # a valid plan takes the bulk path
        assert _service_if_legal(state, planned, result.completed) is not None
