"""Immutable request declarations and the workload manifest (spec 0x01A).

The manifest carries online declarations only. Realized output lengths are
fixture-only hidden truth: they live in :class:`HiddenTruth`, a separate type
that the online projection never contains and that no policy can receive.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from iterserve.records.limits import MAX_EXTENSION_WAIT_ITERATIONS, MAX_WATERMARK_ROWS
from iterserve.records.preemption import (
    FALLBACK_NAMES,
    FallbackMode,
    PreemptionCostSpec,
    PreemptionMode,
    parse_kv_preemption_mode,
)


@dataclass(frozen=True, slots=True)
class SloTargets:
    """Latency limits of one request (0x07); ``None`` means unconstrained."""

    ttft_ms: float | None = None
    tbt_ms: float | None = None


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What a client declared when the request arrived.

    ``prompt_token_ids`` is set when real tokens exist (model runs); a
    simulator workload may declare only ``num_prompt_tokens``.
    ``output_forecast`` is a source-labelled prediction a policy may read; it
    is never the realized length.
    """

    request_id: str
    arrival: float  # run clock (records/__init__: Time)
    num_prompt_tokens: int
    max_output_tokens: int
    client_id: str = "default"
    priority: int = 0
    prompt_token_ids: tuple[int, ...] | None = None
    slo: SloTargets | None = None
    output_forecast: float | None = None
    output_forecast_p90: float | None = None

    def __post_init__(self) -> None:
        if not self.request_id:
            raise ValueError("request_id must be non-empty")
        if not self.client_id:
            raise ValueError(f"{self.request_id}: client_id must be a non-empty string")
        for name in ("output_forecast", "output_forecast_p90"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{self.request_id}: {name} must be a finite number >= 0")
        if self.num_prompt_tokens < 1:
            raise ValueError(f"{self.request_id}: prompt_tokens must be >= 1")
        if self.max_output_tokens < 1:
            raise ValueError(f"{self.request_id}: max_output_tokens must be >= 1")
        if self.arrival < 0:
            raise ValueError(f"{self.request_id}: arrival must be >= 0")
        ids = self.prompt_token_ids
        if ids is not None and len(ids) != self.num_prompt_tokens:
            raise ValueError(f"{self.request_id}: prompt_token_ids length != prompt_tokens")


@dataclass(frozen=True, slots=True)
class Capacity:
    """Per-iteration budgets and the machine's logical KV rows (0x05).

    max_num_batched_tokens: max token rows per iteration (K_token).
    max_num_seqs: max distinct requests per iteration (K_seq).
    kv_rows: a logical KV pool of this many rows (block size 1) when the
    workload has no ``kv`` section. Policy settings (chunk size, tau, ...)
    belong to the policy, not here (``OnlineWorkload.policy_settings``).
    """

    max_num_batched_tokens: int
    max_num_seqs: int
    kv_rows: int | None = None

    def __post_init__(self) -> None:
        if self.max_num_batched_tokens < 1:
            raise ValueError("capacity.max_num_batched_tokens must be >= 1")
        if self.max_num_seqs < 1:
            raise ValueError("capacity.max_num_seqs must be >= 1")
        if self.kv_rows is not None and self.kv_rows < 1:
            raise ValueError("capacity.kv_rows must be >= 1 when set")


@dataclass(frozen=True, slots=True)
class PolicyIdentity:
    policy_id: str
    policy_version: str


#: the default bound on 0x06's TEMPORARILY_UNAVAILABLE wait (records/release_waits):
#: far longer than any release a memory owner here delays (a few iterations),
#: so only a stuck release reaches it
DEFAULT_EXTENSION_WAIT_MAX_ITERATIONS = 64


def check_extension_wait_bound(value: object) -> int:
    """``kv.extension_wait_max_iterations`` as declared: an integer in
    [1, MAX_EXTENSION_WAIT_ITERATIONS]; anything else raises naming the field."""
    if (isinstance(value, bool) or not isinstance(value, int)
            or not 1 <= value <= MAX_EXTENSION_WAIT_ITERATIONS):
        raise ValueError(f"kv.extension_wait_max_iterations must be an integer in "
                         f"[1, {MAX_EXTENSION_WAIT_ITERATIONS}], got {value!r}")
    return value


ADMISSION_NAMES = ("none", "max", "point", "quantile")


def check_admission(name: str) -> None:
    """``none`` | ``max`` | ``point`` | ``quantile`` | ``watermark:W`` with W a
    decimal row count in [0, MAX_WATERMARK_ROWS]. Anything else (``max:5``,
    ``watermark:``, ``watermark:-5``, ``watermark:nan``) raises: it used to be
    read silently as another estimate."""
    family, sep, arg = name.partition(":")
    if not sep and family in ADMISSION_NAMES:
        return
    if family == "watermark" and sep and arg.isascii() and arg.isdigit():
        if int(arg) <= MAX_WATERMARK_ROWS:
            return
        raise ValueError(f"watermark rows must be <= {MAX_WATERMARK_ROWS}, got {arg}")
    raise ValueError(f"must be one of {list(ADMISSION_NAMES)} or 'watermark:ROWS' "
                     f"(ROWS an integer >= 0), got {name!r}")


@dataclass(frozen=True, slots=True)
class KvSpec:
    """The workload's ``kv`` section (0x05, 0x06, 0x0C): a paged pool of
    ``num_kv_blocks`` blocks of ``block_size`` rows, an optional host swap pool,
    the logical bytes per row (for byte reports), the admission estimate and
    the preemption mode (:class:`PreemptionMode`; the file spells it
    ``recompute`` or ``swap``)."""

    num_kv_blocks: int
    block_size: int = 16
    num_host_blocks: int = 0
    bytes_per_row: int | None = None
    admission: str = "none"
    preemption_mode: PreemptionMode = PreemptionMode.RECOMPUTE
    plan_prefix_hits: bool = False  # claim verified hits before the policy runs (0x0E)
    # what a failed preservation falls back to (0x0C's fallback matrix)
    preservation_fallback: FallbackMode = FallbackMode.RECOMPUTE
    # C_recompute vs C_preserve inputs, for preemption_mode ``cheaper`` (0x0C)
    preemption_cost: PreemptionCostSpec | None = None
    # consecutive decisions a request may wait on a release in flight (0x06
    # TEMPORARILY_UNAVAILABLE) before the next plan treats it as FAILED
    extension_wait_max_iterations: int = DEFAULT_EXTENSION_WAIT_MAX_ITERATIONS

    def __post_init__(self) -> None:
        check_extension_wait_bound(self.extension_wait_max_iterations)
        if self.num_kv_blocks < 1 or self.block_size < 1 or self.num_host_blocks < 0:
            raise ValueError("kv: num_kv_blocks and block_size must be >= 1, "
                             "num_host_blocks >= 0")
        object.__setattr__(self, "preemption_mode",
                           parse_kv_preemption_mode(self.preemption_mode))
        if not isinstance(self.preservation_fallback, FallbackMode):
            if self.preservation_fallback not in FALLBACK_NAMES:
                raise ValueError(f"kv.preservation_fallback must be one of {list(FALLBACK_NAMES)}")
            object.__setattr__(self, "preservation_fallback",
                               FallbackMode(self.preservation_fallback))
        if self.bytes_per_row is not None and self.bytes_per_row < 1:
            raise ValueError("kv.bytes_per_row must be >= 1")
        if self.preemption_mode is PreemptionMode.CHEAPER and (
                self.preemption_cost is None or self.bytes_per_row is None
                or not self.num_host_blocks):
            raise ValueError("kv.preemption_mode 'cheaper' needs kv.preemption_cost, "
                             "kv.bytes_per_row and kv.num_host_blocks > 0 (both modes allowed)")
        try:
            check_admission(self.admission)
        except ValueError as exc:
            raise ValueError(f"kv.admission: {exc}") from None


@dataclass(frozen=True, slots=True)
class FairnessSpec:
    """The workload's ``fairness`` section (0x09A, F52): declared service
    weights. Weighted service W_i = (w_p * completed prompt rows + w_q *
    completed output tokens) / client_weight_i; unnamed clients weigh 1.
    ``starvation_horizon`` turns on the run's starvation guard (F63)."""

    prompt_weight: float = 1.0
    output_weight: float = 1.0
    client_weights: tuple[tuple[str, float], ...] = ()
    starvation_horizon: float | None = None  # the run's starvation guard (clock units)

    def __post_init__(self) -> None:
        horizon = self.starvation_horizon
        if horizon is not None and not (math.isfinite(horizon) and horizon > 0):
            raise ValueError("fairness.starvation_horizon must be finite and > 0")
        for name in ("prompt_weight", "output_weight"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"fairness.{name} must be finite and >= 0")
        for client, weight in self.client_weights:
            if not (math.isfinite(weight) and weight > 0):
                raise ValueError(f"fairness.client_weights[{client!r}] must be finite and > 0")

    def client_weight(self, client_id: str) -> float:
        return dict(self.client_weights).get(client_id, 1.0)


@dataclass(frozen=True, slots=True)
class OnlineWorkload:
    """The online projection of a workload manifest: no hidden truth.

    ``policy_settings`` are the workload's suggested policy settings (name ->
    value, for whichever policy runs it); the policy validates the ones it
    takes when it is made (``policies.registry.policy_for``).
    """

    workload_id: str
    clock: str
    capacity: Capacity
    requests: tuple[RequestSpec, ...]
    policy: PolicyIdentity | None = None
    kv: KvSpec | None = None
    fairness: FairnessSpec | None = None
    policy_settings: Mapping[str, object] = field(default_factory=dict)
    _by_id: dict[str, RequestSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {r.request_id: r for r in self.requests})

    def spec(self, request_id: str) -> RequestSpec:
        return self._by_id[request_id]


@dataclass(frozen=True, slots=True)
class HiddenTruth:
    """Fixture-only hidden truth: realized output lengths per request id, and
    injected execution failures (the executor's facts, never a policy's).

    Only the simulated executor and the offline evaluator may hold this.
    """

    realized_output_tokens: Mapping[str, int] = field(default_factory=dict)
    # (request_id, decision_id): that decision's work for the request fails (fault injection)
    injected_failures: frozenset[tuple[str, int]] = frozenset()


@dataclass(frozen=True, slots=True)
class WorkloadManifest:
    """A workload file as loaded: online declarations plus hidden truth."""

    online: OnlineWorkload
    hidden: HiddenTruth

    def online_projection(self) -> OnlineWorkload:
        """What a policy may see (0x01A): the hidden truth removed."""
        return self.online
