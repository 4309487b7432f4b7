"""Generator specs (``iterserve workload gen SPEC``): parsing and validation.

A spec is a JSON object (schema in docs/workloads.md). Every problem raises
:class:`WorkloadSpecError` with one line naming the field, for example
``clients[1].prompt_tokens.median: must be > 0``. Parsing does no I/O: an
empirical length distribution that names a trace is resolved through the
``read_trace_lengths`` callable the caller injects (the CLI reads files).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from iterserve.records.limits import MAX_REQUESTS
from iterserve.records.spec import SloTargets
from iterserve.records.workload import WorkloadError, parse_workload
from iterserve.sim.arrivals import (
    ArrivalProcess,
    ExplicitArrivals,
    GammaArrivals,
    OnOffArrivals,
    PoissonArrivals,
)
from iterserve.sim.distributions import (
    EmpiricalLength,
    FixedLength,
    LengthDistribution,
    LognormalLength,
    UniformLength,
)

# (path, format, column "prompt" | "output") -> lengths
TraceLengthReader = Callable[[str, str, str], tuple[int, ...]]

CLOCKS = ("ms", "iteration")
_TOP_FIELDS = {"workload_id", "description", "seed", "num_requests", "clock", "iteration_s",
               "capacity", "kv", "policy_settings", "arrival", "clients", "slo_classes",
               "prefix_groups", "vocab_size"}
_CLIENT_FIELDS = {"client_id", "weight", "priority", "slo_class", "prefix_group",
                  "prompt_tokens", "output_tokens", "max_output_tokens"}
_ARRIVAL_FIELDS = {"poisson": {"rate_per_s"}, "gamma": {"rate_per_s", "cv"},
                   "on_off": {"rate_per_s", "on_s", "off_s"}, "explicit": {"timestamps_s"}}
_LENGTH_FIELDS = {"fixed": {"value"}, "uniform": {"min", "max"},
                  "lognormal": {"median", "sigma", "min", "max"},
                  "empirical": {"values", "trace", "format", "column"}}


class WorkloadSpecError(ValueError):
    """A generator spec is malformed; the message names the field."""


@dataclass(frozen=True, slots=True)
class PrefixGroup:
    """Requests of a group start with one of ``num_variants`` shared
    prefixes of ``num_prefix_tokens`` token ids (real identities for the
    prefix cache)."""

    name: str
    num_prefix_tokens: int
    num_variants: int = 1


@dataclass(frozen=True, slots=True)
class ClientSpec:
    client_id: str
    weight: float
    priority: int
    prompt_tokens: LengthDistribution
    output_tokens: LengthDistribution  # realized lengths: hidden truth only
    max_output_tokens: int  # the declared cap (online)
    slo: SloTargets | None = None
    prefix_group: PrefixGroup | None = None


@dataclass(frozen=True, slots=True)
class GeneratorSpec:
    workload_id: str
    seed: int
    num_requests: int
    clock: str
    seconds_per_clock_unit: float
    arrival: ArrivalProcess
    clients: tuple[ClientSpec, ...]
    capacity: Mapping[str, Any] = field(hash=False)
    kv: Mapping[str, Any] | None = field(default=None, hash=False)
    policy_settings: Mapping[str, Any] | None = field(default=None, hash=False)
    description: str | None = None
    vocab_size: int = 32000


def parse_spec(raw: Any, read_trace_lengths: TraceLengthReader | None = None) -> GeneratorSpec:
    obj = _object(raw, "spec")
    _no_unknown(obj, _TOP_FIELDS, "spec")
    clock = _get(obj, "clock", "spec", str, "ms")
    if clock not in CLOCKS:
        raise WorkloadSpecError(f"clock: must be one of {list(CLOCKS)}, got {clock!r}")
    arrival = _arrival(_object(_get(obj, "arrival", "spec", dict), "arrival"))
    num_requests = _num_requests(obj, arrival)
    slo_classes = _slo_classes(_object(_get(obj, "slo_classes", "spec", dict, {}), "slo_classes"))
    groups = _prefix_groups(_object(_get(obj, "prefix_groups", "spec", dict, {}),
                                    "prefix_groups"))
    clients_raw = _get(obj, "clients", "spec", list)
    if not clients_raw:
        raise WorkloadSpecError("clients: needs at least one client")
    clients = tuple(_client(item, f"clients[{i}]", slo_classes, groups, read_trace_lengths)
                    for i, item in enumerate(clients_raw))
    ids = [c.client_id for c in clients]
    if len(set(ids)) != len(ids):
        raise WorkloadSpecError(f"clients: duplicate client_id in {ids}")
    spec = GeneratorSpec(
        workload_id=_get(obj, "workload_id", "spec", str),
        seed=_nonnegative_int(obj, "seed", "spec"),
        num_requests=num_requests,
        clock=clock,
        seconds_per_clock_unit=_clock_unit_s(obj, clock),
        arrival=arrival,
        clients=clients,
        capacity=_object(_get(obj, "capacity", "spec", dict), "capacity"),
        kv=None if obj.get("kv") is None else _object(obj["kv"], "kv"),
        policy_settings=(None if obj.get("policy_settings") is None
                         else _object(obj["policy_settings"], "policy_settings")),
        description=_get(obj, "description", "spec", str, None),
        vocab_size=_positive_int(obj, "vocab_size", "spec", 32000),
    )
    _check_capacity(spec)
    return spec


def _arrival(obj: Mapping[str, Any]) -> ArrivalProcess:
    process = _get(obj, "process", "arrival", str)
    if process not in _ARRIVAL_FIELDS:
        raise WorkloadSpecError(
            f"arrival.process: must be one of {sorted(_ARRIVAL_FIELDS)}, got {process!r}")
    _no_unknown(obj, _ARRIVAL_FIELDS[process] | {"process"}, "arrival")

    def number(name: str) -> float:
        return _get(obj, name, "arrival", float)

    try:
        if process == "poisson":
            return PoissonArrivals(number("rate_per_s"))
        if process == "gamma":
            return GammaArrivals(number("rate_per_s"), number("cv"))
        if process == "on_off":
            return OnOffArrivals(number("rate_per_s"), number("on_s"), number("off_s"))
        stamps = _get(obj, "timestamps_s", "arrival", list)
        return ExplicitArrivals(tuple(_as_float(t, f"arrival.timestamps_s[{i}]")
                                      for i, t in enumerate(stamps)))
    except ValueError as exc:
        if isinstance(exc, WorkloadSpecError):
            raise
        raise WorkloadSpecError(f"arrival ({process}): {exc}") from None


def _num_requests(obj: Mapping[str, Any], arrival: ArrivalProcess) -> int:
    """The number of requests to generate, refused past the workload limit
    (``MAX_REQUESTS``) before any is generated."""
    if isinstance(arrival, ExplicitArrivals):
        count = len(arrival.timestamps_s)
        declared = _get(obj, "num_requests", "spec", int, count)
        if declared != count:
            raise WorkloadSpecError(
                f"num_requests: {declared} != {count} explicit arrival timestamps")
    else:
        count = _positive_int(obj, "num_requests", "spec")
    if count > MAX_REQUESTS:
        raise WorkloadSpecError(f"num_requests: at most {MAX_REQUESTS} (documented limit), "
                                f"got {count}")
    return count


def _clock_unit_s(obj: Mapping[str, Any], clock: str) -> float:
    if clock == "ms":
        if "iteration_s" in obj:
            raise WorkloadSpecError("iteration_s: applies only to clock 'iteration'")
        return 0.001
    value = _get(obj, "iteration_s", "spec", float)
    if not value > 0:
        raise WorkloadSpecError(f"iteration_s: must be > 0, got {value!r}")
    return value


def _slo_classes(obj: Mapping[str, Any]) -> dict[str, SloTargets]:
    classes = {}
    for name, raw in obj.items():
        where = f"slo_classes.{name}"
        item = _object(raw, where)
        _no_unknown(item, {"ttft_ms", "tbt_ms"}, where)
        limits = {k: _get(item, k, where, float, None) for k in ("ttft_ms", "tbt_ms")}
        for key, value in limits.items():
            if value is not None and not value > 0:
                raise WorkloadSpecError(f"{where}.{key}: must be > 0, got {value!r}")
        classes[name] = SloTargets(limits["ttft_ms"], limits["tbt_ms"])
    return classes


def _prefix_groups(obj: Mapping[str, Any]) -> dict[str, PrefixGroup]:
    groups = {}
    for name, raw in obj.items():
        where = f"prefix_groups.{name}"
        item = _object(raw, where)
        _no_unknown(item, {"num_prefix_tokens", "num_variants"}, where)
        groups[name] = PrefixGroup(name, _positive_int(item, "num_prefix_tokens", where),
                                   _positive_int(item, "num_variants", where, 1))
    return groups


def _client(raw: Any, where: str, slo_classes: Mapping[str, SloTargets],
            groups: Mapping[str, PrefixGroup], reader: TraceLengthReader | None) -> ClientSpec:
    obj = _object(raw, where)
    _no_unknown(obj, _CLIENT_FIELDS, where)
    output = _length(obj, "output_tokens", where, reader)
    weight = _get(obj, "weight", where, float, 1.0)
    if not weight > 0:
        raise WorkloadSpecError(f"{where}.weight: must be > 0, got {weight!r}")
    return ClientSpec(
        client_id=_get(obj, "client_id", where, str),
        weight=weight,
        priority=_get(obj, "priority", where, int, 0),
        prompt_tokens=_length(obj, "prompt_tokens", where, reader),
        output_tokens=output,
        max_output_tokens=_positive_int(obj, "max_output_tokens", where, output.max_value),
        slo=_lookup(obj, "slo_class", where, slo_classes),
        prefix_group=_lookup(obj, "prefix_group", where, groups),
    )


def _lookup(obj: Mapping[str, Any], name: str, where: str, table: Mapping[str, Any]) -> Any:
    key = _get(obj, name, where, str, None)
    if key is None:
        return None
    if key not in table:
        raise WorkloadSpecError(f"{where}.{name}: no such entry {key!r}; known: {sorted(table)}")
    return table[key]


def _length(obj: Mapping[str, Any], name: str, where: str,
            reader: TraceLengthReader | None) -> LengthDistribution:
    here = f"{where}.{name}"
    item = _object(_get(obj, name, where, dict), here)
    kind = _get(item, "kind", here, str)
    if kind not in _LENGTH_FIELDS:
        raise WorkloadSpecError(f"{here}.kind: must be one of {sorted(_LENGTH_FIELDS)}, "
                                f"got {kind!r}")
    _no_unknown(item, _LENGTH_FIELDS[kind] | {"kind"}, here)
    try:
        if kind == "fixed":
            return FixedLength(_get(item, "value", here, int))
        if kind == "uniform":
            return UniformLength(_get(item, "min", here, int), _get(item, "max", here, int))
        if kind == "lognormal":
            return LognormalLength(_get(item, "median", here, float),
                                   _get(item, "sigma", here, float),
                                   _get(item, "min", here, int, 1), _get(item, "max", here, int))
        return EmpiricalLength(_empirical_values(item, here, reader))
    except ValueError as exc:
        if isinstance(exc, WorkloadSpecError):
            raise
        raise WorkloadSpecError(f"{here}: {exc}") from None


def _empirical_values(item: Mapping[str, Any], here: str,
                      reader: TraceLengthReader | None) -> tuple[int, ...]:
    if ("values" in item) == ("trace" in item):
        raise WorkloadSpecError(f"{here}: give exactly one of 'values' or 'trace'")
    if "values" in item:
        values = _get(item, "values", here, list)
        for i, value in enumerate(values):
            if not isinstance(value, int) or isinstance(value, bool):
                raise WorkloadSpecError(f"{here}.values[{i}]: must be int, got {value!r}")
        return tuple(values)
    column = _get(item, "column", here, str)
    if column not in ("prompt", "output"):
        raise WorkloadSpecError(f"{here}.column: must be 'prompt' or 'output', got {column!r}")
    if reader is None:
        raise WorkloadSpecError(f"{here}.trace: no trace reader in this context")
    return reader(_get(item, "trace", here, str), _get(item, "format", here, str), column)


def _check_capacity(spec: GeneratorSpec) -> None:
    """capacity, kv and policy_settings use the workload file's own schema:
    the workload loader validates them now, before any generation work."""
    probe = {"workload_id": spec.workload_id, "clock": spec.clock,
             "capacity": dict(spec.capacity), "requests": []}
    if spec.kv is not None:
        probe["kv"] = dict(spec.kv)
    if spec.policy_settings is not None:
        probe["policy_settings"] = dict(spec.policy_settings)
    try:
        parse_workload(probe)
    except WorkloadError as exc:
        raise WorkloadSpecError(str(exc)) from None


# --- small typed readers ---------------------------------------------------------------
def _object(raw: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise WorkloadSpecError(f"{where}: must be an object")
    return raw


def _no_unknown(obj: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = set(obj) - allowed
    if unknown:
        raise WorkloadSpecError(f"{where}: unknown field(s) {sorted(unknown)}")


def _get(obj: Mapping[str, Any], name: str, where: str, kind: type, default: Any = ...) -> Any:
    here = name if where == "spec" else f"{where}.{name}"
    if name not in obj:
        if default is ...:
            raise WorkloadSpecError(f"{here}: missing")
        return default
    value = obj[name]
    if kind is float:
        return _as_float(value, here)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise WorkloadSpecError(f"{here}: must be {kind.__name__}, got {value!r}")
    return value


def _as_float(value: Any, here: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WorkloadSpecError(f"{here}: must be a number, got {value!r}")
    if not math.isfinite(value):
        raise WorkloadSpecError(f"{here}: must be finite, got {value!r}")
    return float(value)


def _positive_int(obj: Mapping[str, Any], name: str, where: str, default: Any = ...) -> int:
    value = _get(obj, name, where, int, default)
    if value < 1:
        raise WorkloadSpecError(f"{name if where == 'spec' else f'{where}.{name}'}: "
                                f"must be >= 1, got {value}")
    return int(value)


def _nonnegative_int(obj: Mapping[str, Any], name: str, where: str) -> int:
    value = _get(obj, name, where, int)
    if value < 0:
        raise WorkloadSpecError(f"{name}: must be >= 0, got {value}")
    return int(value)
