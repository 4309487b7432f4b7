"""Select an admission policy by name; unknown names fail loudly (0x06, STYLE 7)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from iterserve.admission.policies import (
    AdmissionPolicy,
    MaximumPolicy,
    PointPolicy,
    QuantilePolicy,
    WatermarkPolicy,
)


class UnknownAdmissionPolicyError(ValueError):
    """The name is not registered; the message lists the valid names."""


@dataclass(frozen=True, slots=True)
class AdmissionPolicyConfig:
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


def _watermark(config: AdmissionPolicyConfig) -> AdmissionPolicy:
    base = build_admission_policy(AdmissionPolicyConfig(config.watermark_base, config.quantile))
    return WatermarkPolicy(base, config.watermark_rows)


_FACTORIES: Mapping[str, Callable[[AdmissionPolicyConfig], AdmissionPolicy]] = MappingProxyType({
    "max": lambda config: MaximumPolicy(),
    "point": lambda config: PointPolicy(),
    "quantile": lambda config: QuantilePolicy(config.quantile),
    "watermark": _watermark,
})

ADMISSION_POLICY_NAMES: tuple[str, ...] = tuple(sorted(_FACTORIES))


def build_admission_policy(config: AdmissionPolicyConfig) -> AdmissionPolicy:
    """The policy ``config.name`` names; raises :class:`UnknownAdmissionPolicyError` otherwise."""
    factory = _FACTORIES.get(config.name)
    if factory is None:
        raise UnknownAdmissionPolicyError(
            f"unknown admission policy {config.name!r}; valid: {', '.join(ADMISSION_POLICY_NAMES)}")
    return factory(config)
