"""The one result assembly both executors share (0x01A, 0x0C): emissions
where the frontier says, the length stop, service without rebuild rows,
failures as facts and the release of finished requests."""

from __future__ import annotations

from iterserve.engine.kv_residency import KvResidency
from iterserve.engine.result_builder import ResultBuilder
from iterserve.kv.config import BlockManagerConfig
from iterserve.records.plan import IntentKind, IterationPlan, QueueIntent, WorkItem
from iterserve.records.state import SchedulerState
from iterserve.records.validate import validate_result
from iterserve.records.view import FinishReason, Lifecycle, RequestView, WorkKind


def _view(rid: str, client: str, p: int, e: int, c: int, max_out: int = 8) -> RequestView:
    return RequestView(rid, 0, 1, client, 0, 0.0, 0, p, max_out, num_emitted=e, num_computed=c,
                       num_committed=c, lifecycle=Lifecycle.RUNNING)


def _item(view: RequestView, end: int, kind: WorkKind) -> WorkItem:
    c = view.num_computed
    return WorkItem(view.request_id, 0, 1, c, end, kind, range(c, end))


VIEWS = {
    "pre": _view("pre", "a", p=8, e=0, c=0),  # partial prefill [0, 4)
    "last": _view("last", "a", p=8, e=0, c=4),  # prefill reaching p: emits token 1
    "reb": _view("reb", "b", p=3, e=2, c=0),  # rebuild [0, 4): nothing emitted, no service
    "dec": _view("dec", "b", p=3, e=7, c=9),  # decode: the 8th output reaches max 8
}
WORK = (_item(VIEWS["pre"], 4, WorkKind.PREFILL_CHUNK), _item(VIEWS["last"], 8,
        WorkKind.PREFILL_CHUNK), _item(VIEWS["reb"], 4, WorkKind.REBUILD),
        _item(VIEWS["dec"], 10, WorkKind.DECODE_ROW))
STATE = SchedulerState(2, 5, 2.0, (), tuple(VIEWS), (), (), VIEWS, 100, 8)
PLAN = IterationPlan(2, 5, "test", "1", WORK, 14, 4)


def _build(length_first: bool, stop: FinishReason | None) -> ResultBuilder:
    builder = ResultBuilder(PLAN, STATE, None, length_first=length_first)
    for work in WORK:
        builder.complete(work, VIEWS[work.request_id], 41, stop)
    return builder


def test_emissions_stops_and_service_follow_the_frontier() -> None:
    builder = _build(length_first=False, stop=None)
    result = builder.build(3.0)
    validate_result(PLAN, STATE, result)
    assert [(c.request_id, c.emitted, c.token_id, c.finish_reason) for c in result.completed] == [
        ("pre", False, None, None), ("last", True, 41, None), ("reb", False, None, None),
        ("dec", True, 41, FinishReason.LENGTH)]
    assert dict(result.service) == {"a": 8, "b": 1}  # the 4 rebuild rows earn nothing
    assert builder.finished == ["dec"] and result.duration == 3.0 and result.capacity is None


def test_a_stop_on_the_length_limit_is_labelled_by_the_executors_precedence() -> None:
    sampled = _build(length_first=False, stop=FinishReason.STOP).build(1.0)
    hidden = _build(length_first=True, stop=FinishReason.STOP).build(1.0)
    assert sampled.completed[3].finish_reason is FinishReason.STOP  # the token wins (vLLM)
    assert hidden.completed[3].finish_reason is FinishReason.LENGTH  # the simulator's length


def test_failures_and_release_go_through_the_memory_owner() -> None:
    kv = KvResidency(BlockManagerConfig(num_device_blocks=4, block_size_rows=4))
    view = _view("x", "a", p=4, e=0, c=0, max_out=1)
    other = _view("y", "a", p=4, e=0, c=0)
    state = SchedulerState(0, 0, 0.0, (), ("x", "y"), (), (), {"x": view, "y": other}, 100, 8)
    work = (_item(view, 4, WorkKind.PREFILL_CHUNK), _item(other, 4, WorkKind.PREFILL_CHUNK))
    plan = IterationPlan(0, 0, "test", "1", work, 8, 2, intents=(
        QueueIntent(IntentKind.PREEMPT_PRESERVE, "z", 0),))
    builder = ResultBuilder(plan, state, kv)
    assert not builder.intent_failed("x")
    assert kv.prepare("x", 0, 0, 4, None) == 0
    builder.complete(work[0], view, 7)  # the first output reaches max 1: a length stop
    builder.fail(work[1])
    assert kv.facts().num_blocks_free == 3
    builder.release_finished()
    result = builder.build(1.0)
    assert result.capacity is not None and result.capacity.num_blocks_free == 4
    assert [(f.request_id, f.reason) for f in result.failures] == [("y", "kv_allocation")]
    assert result.completed[0].finish_reason is FinishReason.LENGTH
