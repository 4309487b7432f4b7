"""Lifecycle contract: negative fixtures, each mutating one invariant."""

import pytest
from metrics_fixtures import stream

from iterserve.metrics import (
    AdmitEvent,
    ArrivalEvent,
    CancelEvent,
    ComputeEvent,
    EventLogError,
    FinishEvent,
    FirstTokenEvent,
    NotReadyEvent,
    PreemptEvent,
    ReadyEvent,
    RejectEvent,
    ResumeEvent,
    TokenEvent,
)
from iterserve.metrics.event_scan import build_timelines


def test_valid_stream_builds() -> None:
    (timeline,) = build_timelines(stream("r", 0.0, [0.1, 0.2])).values()
    assert timeline.emission_s == (0.1, 0.2)
    assert timeline.is_finished and timeline.is_admitted


def test_bench_client_log_without_admit_implies_admission() -> None:
    events = [
        ArrivalEvent(0.0, "r"),
        FirstTokenEvent(0.1, "r"),
        FinishEvent(0.1, "r", reason="eos", num_output_tokens=1),
    ]
    (timeline,) = build_timelines(events).values()
    assert timeline.is_admitted and timeline.admit_s is None


A = ArrivalEvent(0.0, "r")
ADMIT = AdmitEvent(0.0, "r")
FIRST = FirstTokenEvent(0.1, "r")


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ([ADMIT], "before arrival"),
        ([A, A], "duplicate arrival"),
        ([A, ADMIT, ADMIT], "twice"),
        ([A, ADMIT, RejectEvent(0.1, "r", reason="kv")], "already admitted"),
        ([A, FIRST, RejectEvent(0.2, "r", reason="kv")], "already admitted"),
        ([A, ADMIT, TokenEvent(0.1, "r", token_index=1)], "output 0 is next"),
        ([A, ADMIT, FIRST, FIRST], "output 0 but output 1"),
        ([A, ADMIT, FIRST, TokenEvent(0.2, "r", token_index=2)], "output 2 but output 1"),
        (
            [A, ADMIT, FIRST, FinishEvent(0.2, "r", reason="eos", num_output_tokens=2)],
            "reports 2 outputs",
        ),
        ([A, ADMIT, FinishEvent(0.2, "r", reason="eos", num_output_tokens=0)], "without emitting"),
        (
            [
                A,
                ADMIT,
                FIRST,
                FinishEvent(0.1, "r", reason="eos", num_output_tokens=1),
                TokenEvent(0.2, "r", token_index=1),
            ],
            "after the request's terminal",
        ),
        ([A, RejectEvent(0.0, "r", reason="cap"), ADMIT], "terminal"),
        (
            [A, CancelEvent(0.0, "r", reason="client"), CancelEvent(0.1, "r", reason="client")],
            "terminal",
        ),
        ([A, PreemptEvent(0.0, "r")], "before admission"),
        ([A, ADMIT, ResumeEvent(0.1, "r")], "not preempted"),
        ([A, ADMIT, PreemptEvent(0.1, "r"), PreemptEvent(0.2, "r")], "already preempted"),
        ([A, ADMIT, PreemptEvent(0.05, "r"), FIRST], "while preempted"),
        ([A, ReadyEvent(0.0, "r")], "not blocked"),
        ([A, NotReadyEvent(0.0, "r"), NotReadyEvent(0.1, "r")], "already not ready"),
        ([A, ADMIT, NotReadyEvent(0.05, "r"), FIRST], "while not ready"),
        ([A, ADMIT, NotReadyEvent(0.05, "r"), ComputeEvent(0.1, "r", num_rows=1)],
         "not ready"),
        ([A, CancelEvent(0.0, "r", reason="client"), NotReadyEvent(0.1, "r")], "terminal"),
    ],
)
def test_lifecycle_violations_raise(events, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(EventLogError, match=message):
        build_timelines(events)


def test_end_bound_drops_unobserved_facts() -> None:
    (timeline,) = build_timelines(stream("r", 0.0, [0.1, 0.2]), end_s=0.2).values()
    assert timeline.emission_s == (0.1,)
    assert not timeline.is_finished


def test_a_run_of_tokens_goes_in_whole_when_every_entry_is_next() -> None:
    """SortedTimelines.add_tokens: a run of distinct, live requests each at
    its next index is added at once (_add_run); a run that is not (a repeated
    request, a preempted one) is refused by the whole-run path and added
    entry by entry up to the first entry that breaks a rule."""
    from iterserve.metrics.events import ArrivalEvent, FirstTokenEvent, PreemptEvent
    from iterserve.metrics.timeline import SortedTimelines

    timelines = SortedTimelines(compact=True)
    for rid in "abc":
        timelines.add(ArrivalEvent(1.0, rid, client_id="x"))
    for rid in "abc":
        timelines.add(FirstTokenEvent(2.0, rid))
    assert timelines._add_run(3.0, ["a", "b"], [1, 1])
    assert not timelines._add_run(4.0, ["a", "a"], [2, 3])  # one request twice
    assert timelines.add_tokens(4.0, ["a", "a"], [2, 3]) == 2  # entry by entry
    assert not timelines._add_run(5.0, ["a", "b"], [4, 3])  # b's next is 2
    timelines.add(PreemptEvent(5.0, "c", mode="recompute"))
    assert not timelines._add_run(6.0, ["b", "c"], [2, 1])
    assert timelines.add_tokens(6.0, ["b", "c"], [2, 1]) == 1  # c may not emit
    done = timelines.finish()
    assert list(done["a"].emission_s) == [2.0, 3.0, 4.0, 4.0]
    assert list(done["b"].emission_s) == [2.0, 3.0, 6.0]
    assert list(done["c"].emission_s) == [2.0]


def test_readiness_changes_alternate_before_or_after_admission() -> None:
    """A request arrives ready; not_ready / ready alternate, whether it was
    admitted or not (a waiting prompt may need remote K/V, 0x0C), and the
    stream of tokens goes on once it is ready again."""
    events = [A, NotReadyEvent(0.0, "r"), ReadyEvent(0.05, "r"), ADMIT, FIRST,
              PreemptEvent(0.2, "r"), NotReadyEvent(0.2, "r"), ReadyEvent(0.4, "r"),
              ResumeEvent(0.5, "r"), TokenEvent(0.6, "r", token_index=1),
              NotReadyEvent(0.7, "r"), CancelEvent(0.8, "r", reason="client")]
    (timeline,) = build_timelines(events).values()
    assert timeline.not_ready_s == (0.0, 0.2, 0.7)
    assert timeline.ready_s == (0.05, 0.4)
    assert timeline.is_blocked and timeline.emission_s == (0.1, 0.6)


def test_a_blocked_request_leaves_the_whole_run_path() -> None:
    from iterserve.metrics.timeline import SortedTimelines

    timelines = SortedTimelines(compact=True)
    for rid in "ab":
        timelines.add(ArrivalEvent(1.0, rid, client_id="x"))
    for rid in "ab":
        timelines.add(FirstTokenEvent(2.0, rid))
    timelines.add(NotReadyEvent(2.0, "b"))
    assert not timelines._add_run(3.0, ["a", "b"], [1, 1])
    assert timelines.add_tokens(3.0, ["a", "b"], [1, 1]) == 1  # b may not emit
    timelines.add(ReadyEvent(4.0, "b"))
    assert timelines._add_run(5.0, ["a", "b"], [2, 1])
