"""The run's clock scale and the simulated executor's iteration durations.

Clocks. On the ``ms`` clock one clock unit is a millisecond and an
iteration lasts what the model predicts. On the ``iteration`` clock one
iteration is one clock unit, and a unit lasts one second unless a *fixed*
cost model says otherwise (``fixed:10`` makes one iteration 10 ms); a
shape-dependent model cannot be expressed on that clock and is refused.
:func:`seconds_per_clock_unit` is the one place that scale is decided.
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import is_, mul, sub

from iterserve.cost.models import FixedIterationCost
from iterserve.cost.protocol import MS_PER_S, BatchShape, CostModelError, IterationCostModel
from iterserve.records.columns import field_columns
from iterserve.records.plan import IterationPlan
from iterserve.records.state import SchedulerState
from iterserve.records.view import WorkKind


def default_cost_model(clock: str) -> FixedIterationCost:
    """The model a run uses when none is named: one second per iteration on
    the ``iteration`` clock; one millisecond per iteration on the ``ms``
    clock (what the simulator's unit cost always did there)."""
    return FixedIterationCost(MS_PER_S if clock == "iteration" else 1.0)


def seconds_per_clock_unit(clock: str, model: IterationCostModel | None) -> float:
    """Seconds in one unit of the run's clock (events, slack, deadlines);
    ``model`` None is the clock's default model."""
    if clock == "ms":
        return 1.0 / MS_PER_S
    if clock == "iteration":
        if model is None:
            return default_cost_model(clock).iteration_s
        if not isinstance(model, FixedIterationCost):
            raise CostModelError(
                f"the iteration clock needs a fixed cost model (one iteration is one clock "
                f"unit, a fixed-iteration cost model gives its length), got {model.spec}; "
                f"use a workload on the ms clock"
            )
        return model.iteration_s
    raise CostModelError(f"unknown clock {clock!r}")


def batch_shape(plan: IterationPlan, *, attention: bool = True) -> BatchShape:
    """The shape of a planned iteration: decode rows, the other computed
    rows (prefill and rebuild), attention work (all of it, and the decode
    rows' part) and sequences. Summed in C (``map`` over the items' fields:
    the executor asks it of every plan). ``attention`` False leaves the
    attention work 0 (for a model that prices rows only: one count over the
    items instead of six passes)."""
    work = plan.work
    if not work:
        return BatchShape(plan.tokens_used, 0, 0, 0, 0)
    _, _, _, starts, ends, kinds, _, _ = field_columns(work)
    if not attention:
        num_decode_rows = kinds.count(WorkKind.DECODE_ROW)  # an Enum: == is identity
        return BatchShape(plan.tokens_used - num_decode_rows, num_decode_rows, 0, len(work), 0)
    attended = list(map(mul, map(sub, ends, starts), ends))
    is_decode = list(map(is_, kinds, repeat(WorkKind.DECODE_ROW)))
    num_decode_rows = is_decode.count(True)
    return BatchShape(plan.tokens_used - num_decode_rows, num_decode_rows, sum(attended),
                      len(work), sum(compress(attended, is_decode)))


class ClockedCost:
    """What the simulated executor asks: a model's prediction as a duration
    on the workload's clock (always 1 on the ``iteration`` clock)."""

    __slots__ = ("model", "clock", "name", "_attention")

    def __init__(self, model: IterationCostModel, clock: str) -> None:
        seconds_per_clock_unit(clock, model)  # refuses a misfit early
        self.model = model
        self.clock = clock
        self.name = model.model_id
        # a model that does not say it prices rows only is given every field
        self._attention = not getattr(model, "prices_rows_only", False)

    @classmethod
    def unit(cls) -> ClockedCost:
        """One clock unit per iteration, whatever it holds (0x02)."""
        return cls(default_cost_model("iteration"), "iteration")

    def iteration_duration(self, plan: IterationPlan, state: SchedulerState) -> float:
        if self.clock == "iteration":
            return 1.0
        return self.model.predict_batch_ms(batch_shape(plan, attention=self._attention))
