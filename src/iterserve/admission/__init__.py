"""Admission under output uncertainty, preemption intents and resume tickets (0x05, 0x06, 0x0C).

Policy records only: nothing here claims physical memory. Estimates become
allocation requests; the KV layer's facts answer them.
"""

from iterserve.admission.estimators import (
    MaximumEstimator,
    PointEstimator,
    QuantileEstimator,
    ReservationEstimator,
    WatermarkEstimator,
)
from iterserve.admission.evaluator import (
    LogicalAmount,
    PolicyEvaluation,
    PreemptionCandidate,
    evaluate_plan,
)
from iterserve.admission.lifecycle import (
    TRANSITIONS,
    IllegalTransitionError,
    Lifecycle,
    can_transition,
    check_transition,
)
from iterserve.admission.planner import (
    IllegalWatermarkError,
    estimate_reservation,
    plan_admission,
    soft_ceiling_rows,
)
from iterserve.admission.preemption import (
    FallbackMode,
    PreemptionIntent,
    PreemptionReason,
    reclaimed_capacity_bytes,
)
from iterserve.admission.readiness import (
    ReadinessFact,
    ReadinessKind,
    ReadinessRequirement,
    ReadinessStatus,
    is_runnable,
    unmet_requirements,
)
from iterserve.admission.records import (
    AdmissionCandidate,
    AdmissionDecision,
    AdmissionIntent,
    AdmissionPlan,
    AllocationRequest,
    OutputForecast,
    QuantileForecast,
    ReservationBudget,
    ReservationEstimate,
    future_append_rows,
)
from iterserve.admission.registry import (
    ESTIMATOR_NAMES,
    EstimatorConfig,
    UnknownEstimatorError,
    build_estimator,
)
from iterserve.admission.resume import (
    ResumeBlocked,
    ResumeBlocker,
    ResumeTicket,
    derive_resume_ticket,
)
from iterserve.records.preemption import PreemptionMode
from iterserve.records.receipts import (
    BindingMismatchError,
    ForeignBinding,
    ForeignStatus,
    PreservationResult,
    ReleaseResult,
    Staleness,
    is_stale,
    staleness,
)

__all__ = [
    "ESTIMATOR_NAMES", "AdmissionCandidate", "AdmissionDecision", "AdmissionIntent",
    "AdmissionPlan", "ReservationEstimator", "EstimatorConfig", "AllocationRequest",
    "BindingMismatchError", "FallbackMode", "ForeignBinding",
    "ForeignStatus", "IllegalTransitionError", "IllegalWatermarkError", "Lifecycle",
    "LogicalAmount", "MaximumEstimator", "OutputForecast",
    "PointEstimator", "PolicyEvaluation", "PreemptionCandidate", "PreemptionIntent",
    "PreemptionMode", "PreemptionReason", "PreservationResult", "QuantileForecast",
    "QuantileEstimator", "ReadinessFact", "ReadinessKind", "ReadinessRequirement",
    "ReadinessStatus", "ReleaseResult", "ReservationBudget", "ReservationEstimate",
    "ResumeBlocked", "ResumeBlocker", "ResumeTicket", "Staleness", "TRANSITIONS",
    "UnknownEstimatorError", "WatermarkEstimator", "build_estimator",
    "can_transition", "check_transition", "derive_resume_ticket", "estimate_reservation",
    "evaluate_plan", "future_append_rows", "is_runnable", "is_stale", "plan_admission",
    "reclaimed_capacity_bytes", "soft_ceiling_rows", "staleness", "unmet_requirements",
]
