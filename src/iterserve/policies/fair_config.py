"""The config of the client-ledger policies (0x09A, F52): the service
weights they charge. A weight left unset takes the run's declared one (the
workload's ``fairness`` section or the simulate flags), else 1; client
weights come from the run only. The policy's ``ledger_weights`` are what
the engine starts the state's client ledger with."""

from __future__ import annotations

import math
from dataclasses import dataclass

from iterserve.policies.policy import PolicyBase
from iterserve.policies.settings import PolicyConfigError
from iterserve.records.spec import FairnessSpec


@dataclass(frozen=True, slots=True)
class FairConfig:
    prompt_weight: float | None = None
    output_weight: float | None = None

    def __post_init__(self) -> None:
        for name in ("prompt_weight", "output_weight"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not (math.isfinite(value) and value >= 0):
                raise PolicyConfigError(f"setting {name}: must be a finite number >= 0, "
                                        f"got {value!r}")

    def weights(self, declared: FairnessSpec | None) -> FairnessSpec:
        base = declared or FairnessSpec()
        return FairnessSpec(
            base.prompt_weight if self.prompt_weight is None else float(self.prompt_weight),
            base.output_weight if self.output_weight is None else float(self.output_weight),
            base.client_weights)


class LedgerPolicy(PolicyBase[FairConfig]):
    """A policy that decides from the state's client ledger."""

    def __init__(self, config: FairConfig | None = None,
                 declared: FairnessSpec | None = None) -> None:
        super().__init__(config)
        self.ledger_weights = self.config.weights(declared)

    def with_fairness(self, declared: FairnessSpec) -> LedgerPolicy:
        """This policy charging the run's declared weights where its own are unset."""
        return type(self)(self.config, declared)
