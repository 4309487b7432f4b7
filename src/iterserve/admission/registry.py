"""Select a reservation estimator by name; unknown names fail loudly (0x06, STYLE 7)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from iterserve.admission.estimators import (
    MaximumEstimator,
    PointEstimator,
    QuantileEstimator,
    ReservationEstimator,
    WatermarkEstimator,
)


class UnknownEstimatorError(ValueError):
    """The name is not registered; the message lists the valid names."""


@dataclass(frozen=True, slots=True)
class EstimatorConfig:
    """Per-run admission choice, e.g. from a CLI flag.

    ``quantile`` applies to ``quantile`` (and a quantile watermark base);
    ``watermark_rows`` and ``watermark_base`` apply only to ``watermark``.
    """

    name: str
    quantile: float = 0.9
    watermark_rows: int = 0
    watermark_base: str = "quantile"

    def __post_init__(self) -> None:
        if self.name != "watermark" and self.watermark_rows:
            raise ValueError(f"watermark_rows applies only to 'watermark', not {self.name!r}")
        if self.watermark_base == "watermark":
            raise ValueError("a watermark cannot wrap another watermark")


def _watermark(config: EstimatorConfig) -> ReservationEstimator:
    base = build_estimator(EstimatorConfig(config.watermark_base, config.quantile))
    return WatermarkEstimator(base, config.watermark_rows)


_FACTORIES: Mapping[str, Callable[[EstimatorConfig], ReservationEstimator]] = MappingProxyType({
    "max": lambda config: MaximumEstimator(),
    "point": lambda config: PointEstimator(),
    "quantile": lambda config: QuantileEstimator(config.quantile),
    "watermark": _watermark,
})

ESTIMATOR_NAMES: tuple[str, ...] = tuple(sorted(_FACTORIES))


def build_estimator(config: EstimatorConfig) -> ReservationEstimator:
    """The estimator ``config.name`` names; raises :class:`UnknownEstimatorError` otherwise."""
    factory = _FACTORIES.get(config.name)
    if factory is None:
        raise UnknownEstimatorError(
            f"unknown admission estimator {config.name!r}; valid: {', '.join(ESTIMATOR_NAMES)}")
    return factory(config)
