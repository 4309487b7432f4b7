"""``NAME[:params]`` -> a cost model; an unknown name lists the valid ones.

``fixed:10`` (iteration_ms), ``linear:5,0.1,0.5`` (base_ms,
per_prefill_row_ms, per_decode_row_ms; ``field=value`` also works),
``profile:PROFILE.json`` (a file written by ``iterserve profile``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from iterserve.cost.models import FixedIterationCost, LinearIterationCost
from iterserve.cost.profiled import load_profiled_cost
from iterserve.cost.protocol import CostModelError, IterationCostModel

_FIELDS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "fixed": ("iteration_ms",),
    "linear": ("base_ms", "per_prefill_row_ms", "per_decode_row_ms"),
})
_NUMERIC: Mapping[str, Callable[..., IterationCostModel]] = MappingProxyType({
    "fixed": FixedIterationCost,
    "linear": LinearIterationCost,
})


def cost_model_names() -> list[str]:
    return sorted([*_NUMERIC, "profile"])


def parse_cost_model(spec: str) -> IterationCostModel:
    """A model from its spec text; fails loudly with the expected usage."""
    name, _, text = spec.partition(":")
    if name == "profile":
        if not text.strip():
            raise CostModelError(f"cost model {spec!r}: expected profile:PROFILE.json")
        return load_profiled_cost(text.strip())
    factory = _NUMERIC.get(name)
    if factory is None:
        raise CostModelError(
            f"unknown cost model {name!r}; valid cost models: {', '.join(cost_model_names())}"
        )
    return factory(**_numeric_fields(spec, name, text))


def _numeric_fields(spec: str, name: str, text: str) -> dict[str, float]:
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
    return values
