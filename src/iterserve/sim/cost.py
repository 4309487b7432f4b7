"""Iteration cost models and the run's clock scale (0x07 "a versioned cost model").

One model object serves two readers:

- the simulated executor, through :class:`ClockedCost`, which turns the
  model's prediction into an iteration duration on the workload's clock;
- slack consumers (least-slack, SLO-feasible admission), through the
  :class:`iterserve.metrics.slack.IterationCostModel` protocol
  (``model_id``, ``predict_iteration_s``).

Clocks. On the ``ms`` clock one clock unit is a millisecond and an
iteration lasts what the model predicts. On the ``iteration`` clock one
iteration is one clock unit, and a unit lasts one second unless a *fixed*
cost model says otherwise (``fixed:10`` makes one iteration 10 ms); a
row-dependent model cannot be expressed on that clock and is refused.

Both models here are synthetic and unmeasured. The calibrated,
profile-fitted model (``iterserve profile``) is a separate piece of work.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, Protocol

from iterserve.records.plan import IterationPlan
from iterserve.records.state import SchedulerState
from iterserve.records.view import WorkKind

MS_PER_S = 1000.0


class CostModelError(ValueError):
    """A cost-model spec is malformed or does not fit the run's clock."""


class NamedCostModel(Protocol):
    """A cost model the simulator, the policies and the decision log share."""

    @property
    def model_id(self) -> str: ...

    @property
    def spec(self) -> str: ...

    def predict_iteration_ms(self, num_prefill_rows: int, num_decode_rows: int) -> float: ...

    def predict_iteration_s(self, num_prefill_rows: int, num_decode_rows: int) -> float: ...


def _check_ms(name: str, value: float, *, positive: bool) -> None:
    ok = math.isfinite(value) and (value > 0 if positive else value >= 0)
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise CostModelError(f"{name} must be a finite number {bound}, got {value!r}")


@dataclass(frozen=True, slots=True)
class FixedIterationCost:
    """Every iteration lasts ``iteration_ms`` whatever it holds: the 0x07
    burst's 10 ms tick (the spec's ``exclusive_endpoint_lower_bound_v1``
    when used for slack)."""

    iteration_ms: float
    name: ClassVar[str] = "fixed"

    def __post_init__(self) -> None:
        _check_ms("fixed.iteration_ms", self.iteration_ms, positive=True)

    @property
    def model_id(self) -> str:
        return f"fixed-iteration-v1(iteration_ms={self.iteration_ms:g})"

    @property
    def spec(self) -> str:
        return f"fixed:{self.iteration_ms:g}"

    @property
    def iteration_s(self) -> float:
        return self.iteration_ms / MS_PER_S

    def predict_iteration_ms(self, num_prefill_rows: int, num_decode_rows: int) -> float:
        return self.iteration_ms

    def predict_iteration_s(self, num_prefill_rows: int, num_decode_rows: int) -> float:
        return self.iteration_ms / MS_PER_S


@dataclass(frozen=True, slots=True)
class LinearIterationCost:
    """duration_ms = base_ms + per_prefill_row_ms * prefill rows +
    per_decode_row_ms * decode rows. Rebuild rows are charged as prefill
    rows: they are the same compute (0x0C)."""

    base_ms: float
    per_prefill_row_ms: float
    per_decode_row_ms: float
    name: ClassVar[str] = "linear"

    def __post_init__(self) -> None:
        _check_ms("linear.base_ms", self.base_ms, positive=False)
        _check_ms("linear.per_prefill_row_ms", self.per_prefill_row_ms, positive=False)
        _check_ms("linear.per_decode_row_ms", self.per_decode_row_ms, positive=False)
        if self.base_ms + self.per_prefill_row_ms + self.per_decode_row_ms <= 0:
            raise CostModelError("linear cost model must give an iteration a positive duration")

    @property
    def model_id(self) -> str:
        return (f"linear-iteration-v1(base_ms={self.base_ms:g},"
                f"per_prefill_row_ms={self.per_prefill_row_ms:g},"
                f"per_decode_row_ms={self.per_decode_row_ms:g})")

    @property
    def spec(self) -> str:
        return f"linear:{self.base_ms:g},{self.per_prefill_row_ms:g},{self.per_decode_row_ms:g}"

    def predict_iteration_ms(self, num_prefill_rows: int, num_decode_rows: int) -> float:
        return (self.base_ms + self.per_prefill_row_ms * num_prefill_rows
                + self.per_decode_row_ms * num_decode_rows)

    def predict_iteration_s(self, num_prefill_rows: int, num_decode_rows: int) -> float:
        return self.predict_iteration_ms(num_prefill_rows, num_decode_rows) / MS_PER_S


_FIELDS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "fixed": ("iteration_ms",),
    "linear": ("base_ms", "per_prefill_row_ms", "per_decode_row_ms"),
})
COST_MODELS: Mapping[str, Callable[..., NamedCostModel]] = MappingProxyType({
    "fixed": FixedIterationCost,
    "linear": LinearIterationCost,
})


def cost_model_names() -> list[str]:
    return sorted(COST_MODELS)


def parse_cost_model(spec: str) -> NamedCostModel:
    """``NAME:p1,p2`` or ``NAME:field=value,...`` -> a model; fails loudly.

    ``fixed:10`` (iteration_ms), ``linear:5,0.1,0.5`` (base_ms,
    per_prefill_row_ms, per_decode_row_ms).
    """
    name, _, text = spec.partition(":")
    factory = COST_MODELS.get(name)
    if factory is None:
        raise CostModelError(
            f"unknown cost model {name!r}; valid cost models: {', '.join(cost_model_names())}"
        )
    fields = _FIELDS[name]
    usage = f"{name}:{','.join(fields)}"
    parts = [part.strip() for part in text.split(",")] if text.strip() else []
    values: dict[str, float] = {}
    for index, part in enumerate(parts):
        key, sep, raw = part.partition("=")
        if not sep:
            key, raw = (fields[index] if index < len(fields) else "?"), part
        if key not in fields or key in values:
            raise CostModelError(f"cost model {spec!r}: expected {usage}")
        try:
            values[key] = float(raw)
        except ValueError:
            raise CostModelError(f"cost model {spec!r}: {key} must be a number") from None
    if set(values) != set(fields):
        raise CostModelError(f"cost model {spec!r}: expected {usage}")
    return factory(**values)


def default_cost_model(clock: str) -> NamedCostModel:
    """The model a run uses when none is named: one second per iteration on
    the ``iteration`` clock; one millisecond per iteration on the ``ms``
    clock (what the simulator's unit cost always did there)."""
    return FixedIterationCost(MS_PER_S if clock == "iteration" else 1.0)


def seconds_per_clock_unit(clock: str, model: NamedCostModel) -> float:
    """Seconds in one unit of the run's clock (for events and slack)."""
    if clock == "ms":
        return 1.0 / MS_PER_S
    if clock == "iteration":
        if not isinstance(model, FixedIterationCost):
            raise CostModelError(
                f"the iteration clock needs a fixed cost model (one iteration is one clock "
                f"unit), got {model.spec}; use a workload on the ms clock"
            )
        return model.iteration_s
    raise CostModelError(f"unknown clock {clock!r}")


class ClockedCost:
    """The executor's :class:`~iterserve.engine.simulated.CostModel`: the
    model's prediction as a duration on the workload's clock. (A plain class:
    that protocol declares ``name`` as a settable attribute.)"""

    __slots__ = ("model", "clock", "name")

    def __init__(self, model: NamedCostModel, clock: str) -> None:
        seconds_per_clock_unit(clock, model)  # refuses a misfit early
        self.model = model
        self.clock = clock
        self.name = model.model_id

    def iteration_duration(self, plan: IterationPlan, state: SchedulerState) -> float:
        if self.clock == "iteration":
            return 1.0
        num_decode_rows = sum(1 for item in plan.work if item.kind is WorkKind.DECODE_ROW)
        num_compute_rows = plan.tokens_used - num_decode_rows
        return self.model.predict_iteration_ms(num_compute_rows, num_decode_rows)
