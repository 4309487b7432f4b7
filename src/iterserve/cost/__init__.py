"""Iteration cost models: the one home of the cost protocol, the concrete
models (``fixed``, ``linear``, ``profile``), their ``NAME[:params]`` parsing
and the run's clock scale (0x07 "a versioned cost model").

A low layer: it imports only :mod:`iterserve.records` and never knows who
runs (the simulator, the policies and admission all read the same model).
"""

from iterserve.cost.clock import (
    ClockedCost,
    batch_shape,
    default_cost_model,
    seconds_per_clock_unit,
)
from iterserve.cost.models import FixedIterationCost, LinearIterationCost
from iterserve.cost.parse import cost_model_names, parse_cost_model
from iterserve.cost.profiled import CostProfile, FitError, ProfiledIterationCost
from iterserve.cost.protocol import MS_PER_S, BatchShape, CostModelError, IterationCostModel

__all__ = [
    "MS_PER_S",
    "BatchShape",
    "ClockedCost",
    "CostModelError",
    "CostProfile",
    "FitError",
    "FixedIterationCost",
    "IterationCostModel",
    "LinearIterationCost",
    "ProfiledIterationCost",
    "batch_shape",
    "cost_model_names",
    "default_cost_model",
    "parse_cost_model",
    "seconds_per_clock_unit",
]
