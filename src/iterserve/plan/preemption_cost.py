"""C_recompute vs C_preserve: the preemption mode per victim (0x0C).

With ``kv.preemption_mode: cheaper`` the run allows both recovery paths and
each victim takes the one its planning costs favour::

    C_recompute(r) ~= model_cost([T_ready, T_target)) + queue overhead
    C_preserve(r)  ~= bytes / write bandwidth + bytes / read bandwidth
                      + staging overhead

The rebuild is priced by the run's declared iteration-cost model as one
prefill of its rows attending up to T_target (T_ready = 0: recompute drops
every row); the preserved bytes are the rows the victim holds times the
run's bytes per row. Neither is a latency prediction. A tie recomputes
(it needs no host pool).
"""

from __future__ import annotations

from dataclasses import dataclass

from iterserve.cost import BatchShape, parse_cost_model
from iterserve.cost.protocol import IterationCostModel
from iterserve.records import frontier
from iterserve.records.preemption import PreemptionCostSpec, PreemptionMode
from iterserve.records.state import RunRules
from iterserve.records.view import RequestView

MS_PER_S = 1000.0


@dataclass(frozen=True, slots=True)
class ModeChoice:
    """One victim's two costs (ms) and the mode they choose."""

    mode: PreemptionMode
    recompute_ms: float
    preserve_ms: float


class PreemptionCosts:
    """The run's two planning costs, from its declared inputs."""

    __slots__ = ("_spec", "_model", "_bytes_per_row")

    def __init__(self, spec: PreemptionCostSpec, bytes_per_row: int) -> None:
        self._spec = spec
        self._model: IterationCostModel = parse_cost_model(spec.recompute_cost_model)
        self._bytes_per_row = bytes_per_row

    @classmethod
    def of(cls, rules: RunRules) -> PreemptionCosts:
        if rules.preemption_cost is None or rules.bytes_per_row is None:
            raise ValueError("preemption mode 'cheaper' needs kv.preemption_cost and "
                             "kv.bytes_per_row")
        return cls(rules.preemption_cost, rules.bytes_per_row)

    def recompute_ms(self, view: RequestView) -> float:
        """model_cost([0, T_target)) + queue overhead."""
        target = frontier.frozen_target(view.num_prompt_tokens, view.num_emitted,
                                        view.num_computed)
        shape = BatchShape(target, 0, target * target, 1)
        return self._model.predict_batch_ms(shape) + self._spec.queue_overhead_ms

    def preserve_ms(self, view: RequestView) -> float:
        """Write the held rows' bytes out, read them back, plus staging."""
        num_bytes = view.num_computed * self._bytes_per_row
        spec = self._spec
        return (num_bytes / spec.write_bytes_per_s + num_bytes / spec.read_bytes_per_s) \
            * MS_PER_S + spec.staging_overhead_ms

    def choose(self, view: RequestView) -> ModeChoice:
        recompute, preserve = self.recompute_ms(view), self.preserve_ms(view)
        mode = PreemptionMode.SWAP if preserve < recompute else PreemptionMode.RECOMPUTE
        return ModeChoice(mode, recompute, preserve)

