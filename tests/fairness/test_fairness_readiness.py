"""F63 in the report: a client whose live requests are all blocked on foreign
readiness is not eligible (0x09A, 0x0C), so the report's starvation figure
(``metrics/fairness.py``, read from the event log) does not count that time.

Every expectation below is worked by hand from the event times (the
arithmetic is in the comments); none is taken from the module's functions.
Eligible = backlogged (a request arrived, not terminal) and at least one
live request ready; a request is blocked from its ``not_ready`` event to its
``ready`` event (to its end while still blocked). The longest unserved
stretch is the widest gap, inside one eligible interval, between its start,
the completed facts in (start, end] and its end; starved = that gap >=
the horizon.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from fairness_helpers import run_blocked_low

from iterserve.engine.events import EventRecorder
from iterserve.metrics.event_scan import build_timelines, scan_event_list, scan_events
from iterserve.metrics.events import (
    AdmitEvent,
    ArrivalEvent,
    ComputeEvent,
    Event,
    FinishEvent,
    FirstTokenEvent,
    NotReadyEvent,
    ReadyEvent,
    event_lines,
)
from iterserve.metrics.fairness import FairnessReport, evaluate_fairness
from iterserve.metrics.fairness_md import render_fairness
from iterserve.metrics.slo import ObservationWindow
from iterserve.policies.registry import make_policy

WINDOW = ObservationWindow(0.0, 20.0)
HORIZON_S = 10.0


def _served(rid: str, client: str, arrival_s: float, done_s: float,
            blocked: tuple[tuple[float, float], ...] = ()) -> list[Event]:
    """One request of a two-row prompt and one output: arrives at
    ``arrival_s``, blocked over each (not_ready, ready) pair, admitted and
    completed at ``done_s`` (after its last block)."""
    events: list[Event] = [ArrivalEvent(arrival_s, rid, client_id=client, num_prompt_tokens=2)]
    for not_ready_s, ready_s in blocked:
        events += [NotReadyEvent(not_ready_s, rid), ReadyEvent(ready_s, rid)]
    return events + [AdmitEvent(done_s - 1.0, rid), ComputeEvent(done_s, rid, num_rows=2),
                     FirstTokenEvent(done_s, rid),
                     FinishEvent(done_s, rid, reason="max_tokens", num_output_tokens=1)]


def _steady(client: str = "B", last_s: int = 16) -> list[Event]:
    """A client served at every tick 1..last_s (one request each, all from 0):
    backlogged on [0, last_s], its longest unserved stretch 1."""
    return [event for k in range(1, last_s + 1) for event in _served(f"b{k}", client, 0.0, k)]


def _report(events: list[Event], horizon_s: float = HORIZON_S) -> FairnessReport:
    return evaluate_fairness(build_timelines(events).values(), WINDOW, horizon_s=horizon_s)


def _client(report: FairnessReport, client: str) -> dict[str, Any]:
    return report.to_dict()["per_client"][client]


def _without_readiness(events: list[Event]) -> list[Event]:
    return [e for e in events if not isinstance(e, NotReadyEvent | ReadyEvent)]


# A's only request arrives at 0, is blocked from 1 to 15 (14 > the horizon 10)
# and completes at 16. B is served every tick.
BLOCKED = _served("a", "A", 0.0, 16.0, blocked=((1.0, 15.0),)) + _steady()


def test_a_request_blocked_longer_than_the_horizon_is_not_starved() -> None:
    # A eligible on [0, 1] and [15, 16]: 2 s; backlogged [0, 16]: 16 s; blocked 14 s.
    # Unserved: [0, 1] has no fact (1); [15, 16] has the fact at 16 (16 - 15 = 1).
    report = _report(BLOCKED)
    a = _client(report, "A")
    assert (a["backlogged_s"], a["eligible_s"], a["blocked_on_readiness_s"]) == (16.0, 2.0, 14.0)
    assert a["longest_unserved_s"] == 1.0 and a["starved"] is False
    assert report.starved_clients == ()
    b = _client(report, "B")
    assert (b["eligible_s"], b["blocked_on_readiness_s"], b["longest_unserved_s"]) == (16, 0, 1)


def test_the_same_trace_with_the_request_ready_is_starved() -> None:
    # no readiness events: A eligible on [0, 16], first fact at 16: unserved 16 >= 10
    report = _report(_without_readiness(BLOCKED))
    a = _client(report, "A")
    assert a["longest_unserved_s"] == 16.0 and a["starved"] is True
    assert report.starved_clients == ("A",)
    assert "eligible_s" not in a and "blocked_on_readiness_s" not in a


def test_one_ready_request_keeps_the_client_eligible() -> None:
    # a1 blocked [1, 15) as above; a2 arrives at 0, ready throughout, served at 18.
    # A eligible = [0, 16] u [0, 18] = [0, 18]: 18 s, blocked 0; facts at 16, 18:
    # gaps 16 - 0 = 16, 18 - 16 = 2: unserved 16 >= 10, starved
    events = (_served("a1", "A", 0.0, 16.0, blocked=((1.0, 15.0),))
              + _served("a2", "A", 0.0, 18.0) + _steady())
    a = _client(_report(events), "A")
    assert (a["backlogged_s"], a["eligible_s"], a["blocked_on_readiness_s"]) == (18.0, 18.0, 0.0)
    assert a["longest_unserved_s"] == 16.0 and a["starved"] is True


def test_two_blocked_requests_leave_only_the_time_one_of_them_was_ready() -> None:
    # a1 blocked [1, 15), done 16: ready on [0, 1] and [15, 16].
    # a2 arrives at 3 blocked at once until 12, done 13: ready on [12, 13].
    # A eligible: [0, 1], [12, 13], [15, 16]: 3 s of backlogged [0, 16]: blocked 13 s.
    # Unserved: 1 (no fact in [0, 1]), 13 - 12 = 1, 16 - 15 = 1.
    events = (_served("a1", "A", 0.0, 16.0, blocked=((1.0, 15.0),))
              + _served("a2", "A", 3.0, 13.0, blocked=((3.0, 12.0),)) + _steady())
    a = _client(_report(sorted(events, key=lambda e: e.time_s)), "A")
    assert (a["backlogged_s"], a["eligible_s"], a["blocked_on_readiness_s"]) == (16.0, 3.0, 13.0)
    assert a["longest_unserved_s"] == 1.0 and a["starved"] is False


def test_the_stretch_before_a_block_still_counts() -> None:
    # a arrives at 0, blocked from 5 and never ready, never served; the window
    # ends at 20: eligible [0, 5], unserved 5 >= horizon 4: starved (blocking
    # later does not excuse the wait before it); with horizon 6 not starved
    events = [ArrivalEvent(0.0, "a", client_id="A", num_prompt_tokens=2),
              NotReadyEvent(5.0, "a")]
    events = sorted(events + _steady(), key=lambda e: e.time_s)
    a = _client(_report(events, horizon_s=4.0), "A")
    assert (a["backlogged_s"], a["eligible_s"], a["blocked_on_readiness_s"]) == (20.0, 5.0, 15.0)
    assert a["longest_unserved_s"] == 5.0 and a["starved"] is True
    assert _client(_report(events, horizon_s=6.0), "A")["starved"] is False


def test_the_report_states_what_starvation_excludes() -> None:
    report = _report(sorted(BLOCKED, key=lambda e: e.time_s))
    record = report.to_dict()
    assert "blocked on foreign readiness" in record["declarations"]["eligibility"]
    assert "excluded" in record["starvation"]["eligibility"]
    assert record["starvation"]["blocked_on_readiness_s"] == 14.0  # A 14 + B 0
    text = render_fairness(report)
    assert "blocked on readiness, not eligible, F63; s): A 14, B 0" in text


# An events.jsonl as every run wrote it before readiness changes were logged:
# A's request arrives at 0 and completes at 1, B's arrives at 0 and completes at 9.
OLD_LOG = """\
{"kind": "arrival", "time_s": 0.0, "request_id": "a", "client_id": "A", "num_prompt_tokens": 2}
{"kind": "admit", "time_s": 0.0, "request_id": "a"}
{"kind": "arrival", "time_s": 0.0, "request_id": "b", "client_id": "B", "num_prompt_tokens": 2}
{"kind": "admit", "time_s": 0.0, "request_id": "b"}
{"kind": "compute", "time_s": 1.0, "request_id": "a", "num_rows": 2, "is_rebuild": false}
{"kind": "first_token", "time_s": 1.0, "request_id": "a"}
{"kind": "finish", "time_s": 1.0, "request_id": "a", "reason": "max_tokens", "num_output_tokens": 1}
{"kind": "compute", "time_s": 9.0, "request_id": "b", "num_rows": 2, "is_rebuild": false}
{"kind": "first_token", "time_s": 9.0, "request_id": "b"}
{"kind": "finish", "time_s": 9.0, "request_id": "b", "reason": "max_tokens", "num_output_tokens": 1}
"""


def test_an_old_log_reports_the_figures_and_keys_it_always_did(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(OLD_LOG)
    timelines = scan_events(path).timelines.values()
    record = evaluate_fairness(timelines, ObservationWindow(0.0, 10.0), horizon_s=9.0).to_dict()
    # service: 2 prompt rows + 1 output at w_p = w_q = 1; A backlogged [0, 1], B [0, 9]
    assert record["per_client"] == {
        "A": {"weight": 1.0, "service": 3.0, "num_completed_events": 1, "backlogged_s": 1.0,
              "service_rate_while_backlogged": 3.0, "longest_unserved_s": 1.0,
              "starved": False},
        "B": {"weight": 1.0, "service": 3.0, "num_completed_events": 1, "backlogged_s": 9.0,
              "service_rate_while_backlogged": 3.0 / 9.0, "longest_unserved_s": 9.0,
              "starved": True},
    }
    assert record["declarations"]["eligibility"] == (
        "a request arrived and not terminal (continuously backlogged)")
    assert record["starvation"] == {"predicate": "F63", "horizon_s": 9.0,
                                    "horizon_source": "declared", "num_starved": 1,
                                    "starved_clients": ["B"]}
    assert "blocked on readiness" not in render_fairness(
        evaluate_fairness(timelines, ObservationWindow(0.0, 10.0), horizon_s=9.0))


# Through the engine: "low" (priority 4) arrives at tick 0 needing a REMOTE_KV
# fact, published READY at tick 6; a "high" request (priority 0) arrives every
# tick 0..15, one row a tick, so static priority runs high t on [t, t + 1) and
# low only at tick 16, its output at 17. The log: low not_ready at 0, ready at
# 6. F63 with horizon 12: low eligible [6, 17], unserved 17 - 6 = 11 < 12: not
# starved; ready from the start (no readiness event), unserved 17 >= 12: starved.


def _priority_run(ready_at: float, sink: io.StringIO | None = None) -> EventRecorder:
    recorder = EventRecorder(1.0, sink=sink)
    run_blocked_low("readiness-events", make_policy("priority"), [recorder], ready_at)
    recorder.close()
    return recorder


def test_the_engine_logs_each_readiness_flip_once() -> None:
    events = list(_priority_run(ready_at=6).log())
    flips = [(e.kind, e.time_s, e.request_id) for e in events
             if isinstance(e, NotReadyEvent | ReadyEvent)]
    assert flips == [("not_ready", 0.0, "low"), ("ready", 6.0, "low")]
    low = [(e.kind, e.time_s) for e in events if e.request_id == "low"]
    assert low == [("arrival", 0.0), ("not_ready", 0.0), ("ready", 6.0), ("admit", 16.0),
                   ("compute", 17.0), ("first_token", 17.0), ("finish", 17.0)]
    # ready from the start: the flag never flips, nothing is logged
    assert not [e for e in _priority_run(ready_at=0).log()
                if isinstance(e, NotReadyEvent | ReadyEvent)]


def test_a_streamed_log_writes_the_readiness_lines_of_the_in_memory_one() -> None:
    sink = io.StringIO()
    _priority_run(ready_at=6, sink=sink)
    in_memory = "".join(event_lines(_priority_run(ready_at=6).log()))
    assert sink.getvalue() == in_memory
    assert '{"kind": "not_ready", "time_s": 0.0, "request_id": "low"}\n' in in_memory
    assert '{"kind": "ready", "time_s": 6.0, "request_id": "low"}\n' in in_memory


def test_the_engine_run_is_not_starved_while_blocked_and_starved_when_ready() -> None:
    def low(ready_at: float) -> dict[str, Any]:
        scan = scan_event_list(_priority_run(ready_at).log())
        report = evaluate_fairness(scan.timelines.values(), scan.default_window(),
                                   horizon_s=12.0)
        return report.to_dict()["per_client"]["low"]

    blocked = low(ready_at=6)
    assert (blocked["backlogged_s"], blocked["eligible_s"]) == (17.0, 11.0)
    assert blocked["longest_unserved_s"] == 11.0 and blocked["starved"] is False
    ready = low(ready_at=0)
    assert ready["longest_unserved_s"] == 17.0 and ready["starved"] is True
