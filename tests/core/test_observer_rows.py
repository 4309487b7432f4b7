"""The observers' hot paths (issue 15 step 1): the trace's row counts by
kind are the per-kind sums; the codec's rows read kind and finish reason
without ``Enum.value`` and write the stdlib's text."""

from __future__ import annotations

import json

import pytest

from iterserve.records.codec import dumps, plan_to_json, result_to_json
from iterserve.records.plan import IterationPlan, make_work, rows_by_kind
from iterserve.records.result import CompletedInterval, IterationResult
from iterserve.records.view import FinishReason, WorkKind

WORK = (make_work("r\u00e9", 0, 1, 0, 4, WorkKind.PREFILL_CHUNK, ({"z": 1, "a": 2e-05},)),
        make_work("r1", 0, 1, 7, 8, WorkKind.DECODE_ROW, (0, 1, "r1", 0)),
        make_work("r2", 1, 3, 0, 5, WorkKind.REBUILD),
        make_work("r3", 0, 2, 9, 10, WorkKind.DECODE_ROW),
        make_work("r4", 0, 2, 4, 6, WorkKind.PREFILL_CHUNK))


def test_rows_by_kind_sums_each_kind() -> None:
    expected = dict.fromkeys(WorkKind, 0)
    for item in WORK:
        expected[item.kind] += item.end - item.start
    assert rows_by_kind(WORK) == (expected[WorkKind.PREFILL_CHUNK],
                                  expected[WorkKind.DECODE_ROW], expected[WorkKind.REBUILD])
    assert rows_by_kind(WORK) == (6, 2, 5)
    assert rows_by_kind(()) == (0, 0, 0)
    with pytest.raises(KeyError):
        rows_by_kind([make_work("r", 0, 1, 0, 3, "PREFILL_CHUNK")])  # type: ignore[arg-type]


def test_codec_rows_write_the_stdlib_text() -> None:
    plan = IterationPlan(3, 4, "vllm", "1", WORK, 15, 5, ("rank",))
    completed = (CompletedInterval("r\u00e9", 0, 0, 4, True, 11),
                 CompletedInterval("r1", 0, 7, 8, True, 12, FinishReason.LENGTH))
    result = IterationResult(3, 4, completed, duration=1e-06)
    for doc in (plan_to_json(plan), result_to_json(result)):
        assert dumps(doc) == json.dumps(doc, sort_keys=True, separators=(",", ":"))
    work = plan_to_json(plan)["work"]
    assert [row["kind"] for row in work] == [item.kind.value for item in WORK]
    assert work[0]["tie_break"] == [{"z": 1, "a": 2e-05}]
    assert [row["finish_reason"] for row in result_to_json(result)["completed"]] == [None, "length"]
