"""The synthetic, unmeasured cost models: ``fixed`` and ``linear``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from iterserve.cost.protocol import MS_PER_S, BatchShape, CostModelError, RowQueries


def check_ms(name: str, value: float, *, positive: bool) -> None:
    ok = math.isfinite(value) and (value > 0 if positive else value >= 0)
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise CostModelError(f"{name} must be a finite number {bound}, got {value!r}")


@dataclass(frozen=True, slots=True)
class FixedIterationCost(RowQueries):
    """Every iteration lasts ``iteration_ms`` whatever it holds: the 0x07
    burst's 10 ms tick (the spec's ``exclusive_endpoint_lower_bound_v1``
    when used for slack)."""

    iteration_ms: float
    name: ClassVar[str] = "fixed"
    prices_rows_only: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_ms("fixed.iteration_ms", self.iteration_ms, positive=True)

    @property
    def model_id(self) -> str:
        return f"fixed-iteration-v1(iteration_ms={self.iteration_ms:g})"

    @property
    def spec(self) -> str:
        return f"fixed:{self.iteration_ms:g}"

    @property
    def iteration_s(self) -> float:
        return self.iteration_ms / MS_PER_S

    def predict_batch_ms(self, shape: BatchShape) -> float:
        return self.iteration_ms


@dataclass(frozen=True, slots=True)
class LinearIterationCost(RowQueries):
    """duration_ms = base_ms + per_prefill_row_ms * prefill rows +
    per_decode_row_ms * decode rows. Rebuild rows are charged as prefill
    rows: they are the same compute (0x0C)."""

    base_ms: float
    per_prefill_row_ms: float
    per_decode_row_ms: float
    name: ClassVar[str] = "linear"
    prices_rows_only: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_ms("linear.base_ms", self.base_ms, positive=False)
        check_ms("linear.per_prefill_row_ms", self.per_prefill_row_ms, positive=False)
        check_ms("linear.per_decode_row_ms", self.per_decode_row_ms, positive=False)
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

    def predict_batch_ms(self, shape: BatchShape) -> float:
        return (self.base_ms + self.per_prefill_row_ms * shape.num_prefill_rows
                + self.per_decode_row_ms * shape.num_decode_rows)
