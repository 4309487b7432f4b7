"""Records and contract layer (0x00B, 0x01A): immutable specs, views, state,
plan and result, their validation and the pure state transition.

This layer imports neither torch, the server nor any policy. It also owns the
codecs that turn files into records: the workload file (``workload.py``,
``workload_schema.py``, ``workload_json.py``) and the decision-log records
(``codec.py``).

Time. A float that carries a time and has no unit suffix (``arrival``,
``now``, ``first_token_time``, ``last_output_time``, ``duration``) is on the
*run clock* named by ``RunRules.clock``: ``ms`` (one unit is a millisecond)
or ``iteration`` (one unit is one iteration). ``cost/clock.py`` owns the
scale to seconds (``seconds_per_clock_unit``); names that leave the run clock
carry their unit (``ttft_ms``, ``time_s``). The JSON keys stay as they are.
"""

from iterserve.records.errors import ContractViolation
from iterserve.records.plan import IntentKind, IterationPlan, QueueIntent, WorkItem, make_work
from iterserve.records.result import CompletedInterval, IterationResult, WorkFailure
from iterserve.records.spec import (
    Capacity,
    HiddenTruth,
    OnlineWorkload,
    PolicyIdentity,
    RequestSpec,
    SloTargets,
    WorkloadManifest,
)
from iterserve.records.state import CapacityFacts, SchedulerState
from iterserve.records.transition import advance, cancel, with_arrivals
from iterserve.records.validate import validate_plan, validate_result, validate_state
from iterserve.records.view import FinishReason, Lifecycle, RequestView, WorkKind, derive_kind

__all__ = [
    "Capacity", "CapacityFacts", "CompletedInterval", "ContractViolation", "FinishReason",
    "HiddenTruth", "IntentKind", "IterationPlan", "IterationResult", "Lifecycle",
    "OnlineWorkload", "PolicyIdentity", "QueueIntent", "RequestSpec", "RequestView",
    "SchedulerState", "SloTargets", "WorkFailure", "WorkItem", "WorkKind", "WorkloadManifest",
    "advance", "cancel", "derive_kind", "make_work", "validate_plan", "validate_result",
    "validate_state", "with_arrivals",
]
