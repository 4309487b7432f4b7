"""Hypothesis: random lifecycles, early window ends -> the ledger closes and
token counts reconcile with the raw event log (F35, F37)."""

from pathlib import Path
from tempfile import TemporaryDirectory

from hypothesis import given, settings
from hypothesis import strategies as st

from iterserve.metrics import (
    AdmitEvent,
    ArrivalEvent,
    CancelEvent,
    Event,
    EventLog,
    FinishEvent,
    FirstTokenEvent,
    ObservationWindow,
    Outcome,
    PreemptEvent,
    RejectEvent,
    ResumeEvent,
    SloConfig,
    TokenEvent,
    evaluate,
)

_MS = st.integers(min_value=0, max_value=400)


@st.composite
def _request(draw: st.DrawFn, index: int) -> list[Event]:
    rid = f"r{index}"
    t = draw(st.integers(0, 5000))
    events: list[Event] = [ArrivalEvent(t / 1000, rid, client_id=draw(st.sampled_from("abc")))]
    fate = draw(st.sampled_from(["reject", "wait", "cancel_queued", "run"]))
    if fate == "reject":
        return events + [
            RejectEvent((t + draw(_MS)) / 1000, rid, reason=draw(st.sampled_from(["cap", "kv"])))
        ]
    if fate == "cancel_queued":
        return events + [CancelEvent((t + draw(_MS)) / 1000, rid, reason="client")]
    if fate == "wait":
        return events
    t += draw(_MS)
    events.append(AdmitEvent(t / 1000, rid))
    num_outputs = draw(st.integers(0, 6))
    preempt_before = draw(st.integers(0, num_outputs))
    for index_out in range(num_outputs):
        if index_out == preempt_before:
            t += draw(_MS)
            events.append(PreemptEvent(t / 1000, rid))
            t += draw(_MS)
            events.append(ResumeEvent(t / 1000, rid))
        t += draw(_MS)
        token = (
            FirstTokenEvent(t / 1000, rid)
            if index_out == 0
            else TokenEvent(t / 1000, rid, token_index=index_out)
        )
        events.append(token)
    ending = draw(st.sampled_from(["finish", "cancel", "open", "preempted"]))
    if ending == "finish" and num_outputs:
        events.append(
            FinishEvent((t + draw(_MS)) / 1000, rid, reason="eos", num_output_tokens=num_outputs)
        )
    elif ending == "preempted":
        events.append(PreemptEvent((t + draw(_MS)) / 1000, rid, mode="swap"))
    elif ending == "cancel":
        events.append(CancelEvent((t + draw(_MS)) / 1000, rid, reason="timeout"))
    return events


@st.composite
def _run(draw: st.DrawFn) -> tuple[EventLog, ObservationWindow]:
    count = draw(st.integers(0, 25))
    groups = [draw(_request(index)) for index in range(count)]
    log = EventLog(
        sorted((event for group in groups for event in group), key=lambda event: event.time_s)
    )
    start_ms = draw(st.integers(0, 3000))
    end_ms = start_ms + draw(st.integers(1, 8000))
    return log, ObservationWindow(start_ms / 1000, end_ms / 1000)


_SLO = SloConfig(ttft_ms=300.0, tbt_ms=250.0, tpot_ms=200.0)


@settings(max_examples=150, deadline=None)
@given(_run())
def test_partition_closes_and_tokens_reconcile(run: tuple[EventLog, ObservationWindow]) -> None:
    log, window = run
    report = evaluate(log, _SLO, window)
    counts = report.outcomes
    cohort = {
        e.request_id for e in log if isinstance(e, ArrivalEvent) and window.contains(e.time_s)
    }
    observed = [e for e in log if e.request_id in cohort and e.time_s < window.end_s]

    def num(kind: type) -> int:
        return sum(isinstance(e, kind) for e in observed)

    assert counts.num_offered == len(cohort) == len(report.request_outcomes)
    assert (
        counts.num_slo_valid
        + counts.num_completed_miss
        + counts.num_rejected
        + counts.num_unfinished
        == len(cohort)
    )
    assert counts.num_rejected == num(RejectEvent)
    assert counts.num_completed == num(FinishEvent)
    assert dict(counts.unfinished_reasons).get("cancelled", 0) == num(CancelEvent)
    assert report.rates.num_emitted_tokens == num(FirstTokenEvent) + num(TokenEvent)
    valid = {
        item.request_id for item in report.request_outcomes if item.outcome is Outcome.SLO_VALID
    }
    valid_tokens = sum(
        isinstance(e, FirstTokenEvent | TokenEvent) and e.request_id in valid for e in observed
    )
    assert report.rates.num_slo_valid_tokens == valid_tokens <= report.rates.num_emitted_tokens
    assert sum(client.outcomes.num_offered for client in report.per_client) == len(cohort)
    assert len(report.samples.ttft_s) == num(FirstTokenEvent)
    assert len(report.samples.tbt_s) == num(TokenEvent)


@settings(max_examples=30, deadline=None)
@given(_run())
def test_jsonl_round_trip_preserves_the_report(run: tuple[EventLog, ObservationWindow]) -> None:
    log, window = run
    with TemporaryDirectory() as directory:
        path = Path(directory) / "run.jsonl"
        log.write_jsonl(path)
        again = EventLog.read_jsonl(path)
    assert evaluate(again, _SLO, window).to_dict(include_samples=True) == evaluate(
        log, _SLO, window
    ).to_dict(include_samples=True)
