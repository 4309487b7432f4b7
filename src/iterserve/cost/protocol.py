"""The one iteration-cost protocol (0x07 "a versioned cost model") and the
batch shape it prices.

Every reader of a cost model uses this protocol: the simulated executor
(through :class:`iterserve.cost.clock.ClockedCost`), the deadline policies
and SLO-feasible admission (through ``predict_iteration_s``, the row-mix
question slack asks), the decision log and the CLI (``spec``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from iterserve.records.time_units import MS_PER_S


class CostModelError(ValueError):
    """A cost-model spec or profile is malformed or does not fit the run's clock."""


@dataclass(frozen=True, slots=True)
class BatchShape:
    """What one iteration carries. Prefill rows include rebuild rows (the
    same compute, 0x0C). ``num_attended_tokens`` is the attention work:
    the sum over sequences of rows x attended positions (the interval's end).
    ``num_decode_context_tokens`` is the part of it the decode rows attend
    (one row reading its whole context): measured on CPU, a decode row's
    position costs tens of times what a prefill row's does (its attention is one
    matrix product), so a profile prices the two apart."""

    num_prefill_rows: int
    num_decode_rows: int
    num_attended_tokens: int = 0
    num_sequences: int = 0
    num_decode_context_tokens: int = 0

    @classmethod
    def of_rows(cls, num_prefill_rows: int, num_decode_rows: int) -> BatchShape:
        """The shape slack asks about: rows only, one sequence per decode row
        plus one prefilling sequence, no attention work (a lower bound)."""
        num_sequences = num_decode_rows + (1 if num_prefill_rows else 0)
        return cls(num_prefill_rows, num_decode_rows, 0, num_sequences)


@runtime_checkable
class IterationCostModel(Protocol):
    """Predicts the duration of one iteration. ``model_id`` names the model
    and its version (in every slack estimate and contract); ``spec`` is the
    ``NAME[:params]`` text that parses back to the same model."""

    @property
    def model_id(self) -> str: ...

    @property
    def spec(self) -> str: ...

    def predict_batch_ms(self, shape: BatchShape) -> float: ...

    def predict_iteration_s(self, num_prefill_rows: int, num_decode_rows: int) -> float: ...


class RowQueries:
    """Mixin: the row-mix questions answered from ``predict_batch_ms``.
    ``prices_rows_only``: the model reads a shape's rows and sequences, not
    its attention work, so the simulated executor need not sum it (a model
    that prices attention, or one that does not say, gets every field)."""

    __slots__ = ()
    prices_rows_only: ClassVar[bool] = False

    def predict_batch_ms(self, shape: BatchShape) -> float:
        raise NotImplementedError

    def predict_iteration_ms(self, num_prefill_rows: int, num_decode_rows: int) -> float:
        return self.predict_batch_ms(BatchShape.of_rows(num_prefill_rows, num_decode_rows))

    def predict_iteration_s(self, num_prefill_rows: int, num_decode_rows: int) -> float:
        return self.predict_iteration_ms(num_prefill_rows, num_decode_rows) / MS_PER_S
