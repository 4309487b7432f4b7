"""The workload file's schema, once (pydantic v2, strict): types, ranges and
the documented size limits of :mod:`iterserve.records.limits`.

:func:`validate_workload` returns the validated document or raises
:class:`SchemaError` whose message names the first bad field as a path,
``requests[3].client_id: must be a non-empty string``. Cross-field checks
(duplicate ids, hidden truth naming a request) stay in ``records/workload.py``.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    field_validator,
)

from iterserve.records import limits
from iterserve.records.preemption import FALLBACK_NAMES, KV_PREEMPTION_MODE_NAMES
from iterserve.records.spec import DEFAULT_EXTENSION_WAIT_MAX_ITERATIONS, check_admission


class SchemaError(ValueError):
    """The document breaks the schema; the message names the field path."""


NonEmpty = Annotated[str, Field(min_length=1)]
Budget = Annotated[int, Field(ge=1, le=limits.MAX_BUDGET)]
NumOutputTokens = Annotated[int, Field(ge=1, le=limits.MAX_OUTPUT_TOKENS)]
NumBlocks = Annotated[int, Field(ge=1, le=limits.MAX_NUM_BLOCKS)]
Forecast = Annotated[float, Field(ge=0, le=limits.MAX_OUTPUT_TOKENS, allow_inf_nan=False)]
SloMs = Annotated[float, Field(gt=0, le=limits.MAX_SLO_MS, allow_inf_nan=False)]


def _setting_value(value: Any) -> int | float | str:
    """A policy setting's shape only: a JSON number (finite) or a string.
    The policy's own config checks the value when the policy is made."""
    if _is_int(value) or isinstance(value, str):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise ValueError(f"must be a number or a string, got {_show(value)}")


SettingValue = Annotated[Any, PlainValidator(_setting_value)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SloDoc(_Strict):
    ttft_ms: SloMs | None = None
    tbt_ms: SloMs | None = None


class RequestDoc(_Strict):
    request_id: NonEmpty
    arrival: Annotated[float, Field(ge=0, le=limits.MAX_ARRIVAL, allow_inf_nan=False)]
    prompt_tokens: Any
    max_output_tokens: NumOutputTokens
    client_id: NonEmpty = "default"
    priority: Annotated[int, Field(ge=-limits.MAX_PRIORITY, le=limits.MAX_PRIORITY)] = 0
    slo: SloDoc | None = None
    output_forecast: Forecast | None = None
    output_forecast_p90: Forecast | None = None

    @field_validator("prompt_tokens", mode="plain")
    @classmethod
    def _prompt(cls, value: Any) -> int | list[int]:
        """A token count, or the token ids themselves (a non-empty list)."""
        if isinstance(value, list):
            if not 1 <= len(value) <= limits.MAX_PROMPT_TOKENS:
                raise ValueError(f"must hold 1..{limits.MAX_PROMPT_TOKENS} token ids")
            if not all(_is_int(t) and 0 <= t < 1 << 31 for t in value):
                raise ValueError("token ids must be integers in [0, 2**31)")
            return value
        if not _is_int(value):
            raise ValueError(f"must be an integer or a list of token ids, got {_show(value)}")
        if not 1 <= value <= limits.MAX_PROMPT_TOKENS:
            raise ValueError(f"must be in [1, {limits.MAX_PROMPT_TOKENS}] (documented limit), "
                             f"got {_show(value)}")
        return int(value)


class CapacityDoc(_Strict):
    """Budgets, plus the deprecated policy knobs (read into ``policy_settings``)."""

    max_num_batched_tokens: Budget
    max_num_seqs: Budget
    long_prefill_token_threshold: Budget | None = None
    chunk_size: Budget | None = None
    tau: Budget | None = None
    kv_rows: Annotated[int, Field(ge=1, le=limits.MAX_KV_ROWS)] | None = None


class PreemptionCostDoc(_Strict):
    recompute_cost_model: NonEmpty
    write_bytes_per_s: Annotated[float, Field(gt=0)]
    read_bytes_per_s: Annotated[float, Field(gt=0)]
    staging_overhead_ms: Annotated[float, Field(ge=0)] = 0.0
    queue_overhead_ms: Annotated[float, Field(ge=0)] = 0.0


class KvDoc(_Strict):
    num_kv_blocks: NumBlocks
    block_size: Annotated[int, Field(ge=1, le=limits.MAX_BLOCK_SIZE)] = 16
    num_host_blocks: Annotated[int, Field(ge=0, le=limits.MAX_NUM_BLOCKS)] = 0
    bytes_per_row: Annotated[int, Field(ge=1, le=limits.MAX_BYTES_PER_ROW)] | None = None
    admission: str = "none"
    preemption_mode: Literal[KV_PREEMPTION_MODE_NAMES] = "recompute"  # type: ignore[valid-type]
    plan_prefix_hits: bool = False
    preservation_fallback: Literal[FALLBACK_NAMES] = "recompute"  # type: ignore[valid-type]
    preemption_cost: PreemptionCostDoc | None = None
    extension_wait_max_iterations: Annotated[int, Field(
        ge=1, le=limits.MAX_EXTENSION_WAIT_ITERATIONS)] = DEFAULT_EXTENSION_WAIT_MAX_ITERATIONS
    model_config_: dict[str, Any] | None = Field(default=None, alias="model_config")

    @field_validator("admission")
    @classmethod
    def _admission(cls, value: str) -> str:
        check_admission(value)
        return value


class InjectedFailureDoc(_Strict):
    """That decision's work for the request fails in the simulated executor."""

    request_id: NonEmpty
    decision_id: Annotated[int, Field(ge=0, le=limits.MAX_DECISION_ID)]


class HiddenDoc(_Strict):
    realized_output_tokens: dict[str, NumOutputTokens] = {}
    injected_failures: Annotated[list[InjectedFailureDoc],
                                 Field(max_length=limits.MAX_REQUESTS)] = []


Weight = Annotated[float, Field(ge=0, le=limits.MAX_SERVICE_WEIGHT, allow_inf_nan=False)]
ShareWeight = Annotated[float, Field(gt=0, le=limits.MAX_SERVICE_WEIGHT, allow_inf_nan=False)]


class FairnessDoc(_Strict):
    """Service weights (0x09A, F52) and the starvation guard's horizon."""

    prompt_weight: Weight = 1.0
    output_weight: Weight = 1.0
    client_weights: dict[NonEmpty, ShareWeight] = {}
    starvation_horizon: Annotated[float, Field(gt=0, le=limits.MAX_ARRIVAL,
                                               allow_inf_nan=False)] | None = None


class WorkloadDoc(_Strict):
    workload_id: str
    clock: Literal["iteration", "ms"]
    capacity: CapacityDoc
    requests: Annotated[list[RequestDoc], Field(max_length=limits.MAX_REQUESTS)]
    fixture_only_hidden_truth: HiddenDoc | None = None
    description: str | None = None
    kv: KvDoc | None = None
    policy_settings: dict[NonEmpty, SettingValue] = {}
    fairness: FairnessDoc | None = None


def validate_workload(raw: Any) -> WorkloadDoc:
    """The validated document; raises :class:`SchemaError` naming the first bad field."""
    if not isinstance(raw, dict):
        raise SchemaError(f"workload: must be an object, got {type(raw).__name__}")
    try:
        return WorkloadDoc.model_validate(raw)
    except ValidationError as exc:
        raise SchemaError(_describe(exc.errors(include_url=False)[0])) from None


def _describe(error: Any) -> str:
    loc = tuple(error["loc"])
    if loc and loc[-1] == "[key]":  # pydantic's marker for a bad mapping key
        return f"workload: {field_path(loc[:-1])}: the name {_message(error)}"
    return f"workload: {field_path(loc)}: {_message(error)}"


def field_path(parts: Any) -> str:
    """``requests[3].client_id``; a key that is not a plain name is quoted, so
    the path stays on one line whatever the document holds."""
    def step(part: Any) -> str:
        if isinstance(part, int):
            return f"[{part}]"
        return f".{part}" if str(part).isidentifier() else f"[{_show(str(part))}]"
    return "".join(step(part) for part in parts).lstrip(".")


_MESSAGES = {
    "missing": "missing",
    "extra_forbidden": "unknown field",
    "int_type": "must be an integer",
    "float_type": "must be a finite number",
    "finite_number": "must be a finite number",
    "string_type": "must be a string",
    "string_too_short": "must be a non-empty string",
    "model_type": "must be an object",
    "dict_type": "must be an object",
    "list_type": "must be a list",
    "too_long": "too many entries",
}


def _message(error: Any) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    if kind in ("greater_than_equal", "greater_than"):
        bound = ctx.get("ge", ctx.get("gt"))
        text = f"must be {'>=' if kind.endswith('equal') else '>'} {bound}"
    elif kind == "less_than_equal":
        text = f"must be <= {ctx['le']} (documented limit)"
    elif kind == "literal_error":
        text = f"must be one of {ctx['expected']}"
    elif kind == "too_long":
        text = f"at most {ctx.get('max_length')} entries (documented limit)"
        return text
    else:
        text = _MESSAGES.get(kind, str(error["msg"]).lower())
    if kind in ("missing", "extra_forbidden"):
        return text
    return f"{text}, got {_show(error.get('input'))}"


def _show(value: Any) -> str:
    """A short repr: huge inputs are cut, never rendered whole."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {len(str(value))} digits" if value.bit_length() < 10_000 \
            else "an integer too large to print"
    text = repr(value) if isinstance(value, str | int | float | bool | type(None)) \
        else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
