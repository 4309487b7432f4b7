"""The incremental state digest over a 50,000-request state whose views and
waiting queue are shared with its predecessors (records/view_map,
records/id_queue): an edit anywhere (a view at the queue's head, middle or
tail, a removal from the middle, an arrival) changes the digest, and the
digest is the one a fresh digester computes over every view."""

from __future__ import annotations

import dataclasses

import pytest

from iterserve.records.id_queue import IdQueue
from iterserve.records.state_digest import StateDigester, state_digest
from iterserve.records.transition import cancel, with_arrivals, with_readiness
from iterserve.records.view_map import ViewMap

from .test_decision_cost_scale import _engine


@pytest.fixture(scope="module")
def large_state():  # type: ignore[no-untyped-def]
    engine = _engine(50_000, "vllm")
    state = engine.state
    assert isinstance(state.waiting, IdQueue) and type(state.views) is ViewMap
    return state, engine.bound_workload.requests[0]


def test_an_edit_anywhere_changes_the_digest(large_state) -> None:  # type: ignore[no-untyped-def]
    state, spec = large_state
    digester = StateDigester()
    seen = {digester.digest(state)}
    waiting = state.waiting
    for position in (0, len(waiting) // 2, len(waiting) - 1):
        state = with_readiness(state, {waiting[position]: False})
        digest = digester.digest(state)
        assert digest not in seen
        seen.add(digest)
    state = cancel(state, waiting[len(waiting) // 3])  # a removal inside the shared queue
    assert digester.digest(state) not in seen
    seen.add(digester.digest(state))
    late = dataclasses.replace(spec, request_id="late-arrival")
    state = with_arrivals(state, [(late, 10**6)])
    final = digester.digest(state)
    assert final not in seen
    assert final == state_digest(state)  # incremental == a fresh digester over every view
