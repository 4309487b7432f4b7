"""Which samples of an ``n > 1`` request wait for sample 0's prompt (the
server's policy, server/submit.py) and the online front's hold
(engine/held.py), without a model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from iterserve.engine.held import HeldRequest, HeldRequests
from iterserve.engine.online import Submission, _check_waits_for
from iterserve.records.sampling_params import SamplingParams
from iterserve.records.spec import RequestSpec
from iterserve.server.protocol import CompletionRequest
from iterserve.server.submit import submissions

LONG = tuple(range(1, 21))  # 20 tokens: one full 16-row block and more
SHORT = tuple(range(1, 17))  # 16 tokens: a hit leaves the last row, so no full block to share


def waits(prompts, block_size, **fields):
    body = CompletionRequest(model="tiny", prompt=[list(p) for p in prompts], **fields)
    return [sub.waits_for for sub in submissions(body, prompts, 16, "c", block_size)]


def test_followers_wait_for_their_prompts_sample_zero():
    assert waits([LONG, LONG], 16, n=3) == [None, 0, 0, None, 3, 3]
    assert waits([LONG], 16, n=1) == [None]


def test_no_hold_without_prefix_caching_a_full_block_or_with_prompt_logprobs():
    assert waits([LONG], None, n=3) == [None] * 3
    assert waits([SHORT, LONG], 16, n=2) == [None, None, None, 2]
    assert waits([LONG], 16, n=2, echo=True, logprobs=1) == [None, None]


def test_a_follower_must_wait_for_an_earlier_leader():
    params = SamplingParams(max_tokens=2)
    subs = [Submission((1, 2), params, None, waits_for=w) for w in (None, 0, 1, 3)]
    _check_waits_for(subs, 1)
    for index in (2, 3):  # waits for a follower; waits for itself
        with pytest.raises(ValueError, match="not an earlier leader"):
            _check_waits_for(subs, index)


SINK = object()


def held(request_id: str, leader_id: str) -> HeldRequest:
    return HeldRequest(RequestSpec(request_id, 1.0, 2, 2), SINK, leader_id)


def ids(released: list[HeldRequest]) -> list[str]:
    return [h.spec.request_id for h in released]


def state(**views):
    return SimpleNamespace(views={rid: SimpleNamespace(num_emitted=emitted, is_terminal=terminal)
                                  for rid, (emitted, terminal) in views.items()})


def test_followers_are_released_once_their_leader_emitted_or_ended():
    hold = HeldRequests()
    for rid, leader in (("b1", "a"), ("d1", "c"), ("b2", "a"), ("f1", "e")):
        hold.hold(held(rid, leader))
    open_ids = {"a", "c"}
    # e ended before it was published (rejected); a, c have not emitted
    assert ids(hold.take_due(state(a=(0, False)), open_ids.__contains__)) == ["f1"]
    assert ids(hold.take_due(state(a=(1, False), c=(0, False)),
                             open_ids.__contains__)) == ["b1", "b2"]
    hold.hold(held("g1", "c"))
    assert ids(hold.take_due(state(c=(0, True)), open_ids.__contains__)) == ["d1", "g1"]
    hold.hold(held("d1", "c"))
    assert hold.request_ids == ["d1"] and "d1" in hold and len(hold) == 1
    assert hold.take("d1") == held("d1", "c") and hold.take("d1") is None
    assert len(hold) == 0 and hold.take_due(state(), open_ids.__contains__) == []
