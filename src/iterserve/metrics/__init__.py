"""Metrics layer: event log -> clocks -> outcomes -> report (spec 0x07).

Pure Python + numpy-free arithmetic + matplotlib (Agg canvas, in ``plots``
only). Imports no other iterserve layer and reads no hidden truth.
"""

from iterserve.metrics.capacity import (
    SLOT_OCCUPANCY_LABEL,
    IterationComposition,
    OverloadLedger,
    SlotOccupancy,
    queue_backlog,
    slot_occupancy,
    window_overload,
)
from iterserve.metrics.clocks import (
    RequestClocks,
    endpoint_deadline_s,
    first_token_deadline_s,
    next_token_deadline_s,
    request_clocks,
)
from iterserve.metrics.events import (
    AdmitEvent,
    ArrivalEvent,
    CancelEvent,
    ComputeEvent,
    Event,
    EventLog,
    EventLogError,
    FinishEvent,
    FirstTokenEvent,
    NotReadyEvent,
    PreemptEvent,
    ReadyEvent,
    RejectEvent,
    ResumeEvent,
    ScheduleEvent,
    TokenEvent,
    read_jsonl,
    write_jsonl,
)
from iterserve.metrics.outcomes import Attainment, OpenReason, Outcome, OutcomeCounts, Rates
from iterserve.metrics.percentiles import Summary, gated_percentile, summarize
from iterserve.metrics.report import REPORT_SCHEMA, Report, evaluate
from iterserve.metrics.report_md import render_markdown
from iterserve.metrics.series import ResourceSample, ServiceWeights
from iterserve.metrics.slack import SlackEstimate, predicted_slack
from iterserve.metrics.slo import ObservationWindow, SloConfig

__all__ = [
    "REPORT_SCHEMA",
    "SLOT_OCCUPANCY_LABEL",
    "AdmitEvent",
    "ArrivalEvent",
    "Attainment",
    "CancelEvent",
    "ComputeEvent",
    "Event",
    "EventLog",
    "EventLogError",
    "FinishEvent",
    "FirstTokenEvent",
    "IterationComposition",
    "NotReadyEvent",
    "ObservationWindow",
    "OpenReason",
    "Outcome",
    "OutcomeCounts",
    "OverloadLedger",
    "PreemptEvent",
    "Rates",
    "ReadyEvent",
    "RejectEvent",
    "Report",
    "RequestClocks",
    "ResourceSample",
    "ResumeEvent",
    "ScheduleEvent",
    "ServiceWeights",
    "SlackEstimate",
    "SloConfig",
    "SlotOccupancy",
    "Summary",
    "TokenEvent",
    "endpoint_deadline_s",
    "evaluate",
    "first_token_deadline_s",
    "gated_percentile",
    "next_token_deadline_s",
    "predicted_slack",
    "queue_backlog",
    "read_jsonl",
    "render_markdown",
    "request_clocks",
    "slot_occupancy",
    "summarize",
    "window_overload",
    "write_jsonl",
]
