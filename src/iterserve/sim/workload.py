"""Workload files (JSON): strict loading with one-line errors naming the field.

Schema (documented in the README):

    {
      "workload_id": str,
      "clock": "iteration" | "ms",
      "capacity": {"token_budget": int, "sequence_budget": int, "kv_rows": int?},
      "policy_settings": {name: number | str}?,   # e.g. {"chunk_size": 4}
      "requests": [{"request_id": str, "arrival": number, "prompt_tokens": int | [int],
                    "max_output_tokens": int, "client_id": str, "priority": int,
                    "slo": {"ttft_ms": number, "tbt_ms": number}?,
                    "output_forecast": number?, "output_forecast_p90": number?}],
      "fairness": {"prompt_weight": number, "output_weight": number,
                   "client_weights": {client_id: number},
                   "starvation_horizon": number (clock units; turns the guard on)}?,
      "fixture_only_hidden_truth": {"realized_output_tokens": {request_id: int},
                                    "injected_failures": [{"request_id": str,
                                                           "decision_id": int}]?}
    }

Deprecated: the policy knobs ``capacity.max_num_seqs``,
``long_prefill_token_threshold``, ``chunk_size`` and ``tau`` are still read,
into ``policy_settings`` (setting one in both places is an error); they are
written back under ``policy_settings``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iterserve.kv.abi import kv_row_abi_from_hf_config
from iterserve.records.spec import (
    Capacity,
    FairnessSpec,
    HiddenTruth,
    KvSpec,
    OnlineWorkload,
    RequestSpec,
    SloTargets,
    WorkloadManifest,
)

CLOCKS = ("iteration", "ms")
_CAPACITY_FIELDS = ("token_budget", "sequence_budget", "kv_rows")
#: deprecated policy knobs still read from ``capacity`` into ``policy_settings``
LEGACY_CAPACITY_KNOBS = ("max_num_seqs", "long_prefill_token_threshold", "chunk_size", "tau")
_REQUEST_FIELDS = {"request_id", "arrival", "prompt_tokens", "max_output_tokens", "client_id",
                   "priority", "slo", "output_forecast", "output_forecast_p90"}
_TOP_FIELDS = {"workload_id", "clock", "capacity", "requests", "fixture_only_hidden_truth",
               "description", "kv", "policy_settings", "fairness"}
_KV_FIELDS = ("num_blocks", "block_size", "num_host_blocks", "bytes_per_row", "admission",
              "preemption_mode")


class WorkloadError(ValueError):
    """A workload file is malformed; the message names the field."""


def load_workload(path: Path) -> WorkloadManifest:
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return parse_workload(raw)


def parse_workload(raw: Any) -> WorkloadManifest:
    obj = _mapping(raw, "workload")
    unknown = set(obj) - _TOP_FIELDS
    if unknown:
        raise WorkloadError(f"workload: unknown field(s) {sorted(unknown)}")
    clock = _field(obj, "clock", "workload", str)
    if clock not in CLOCKS:
        raise WorkloadError(f"clock: must be one of {list(CLOCKS)}, got {clock!r}")
    requests_raw = _field(obj, "requests", "workload", list)
    requests = tuple(_request(item, f"requests[{i}]") for i, item in enumerate(requests_raw))
    ids = [r.request_id for r in requests]
    duplicates = sorted(rid for rid, n in Counter(ids).items() if n > 1)  # linear: 100k ids
    if duplicates:
        raise WorkloadError(f"requests: duplicate request_id(s) {duplicates}")
    capacity_obj = _mapping(obj.get("capacity"), "capacity")
    online = OnlineWorkload(
        workload_id=_field(obj, "workload_id", "workload", str),
        clock=clock,
        capacity=_capacity(capacity_obj),
        requests=requests,
        kv=None if obj.get("kv") is None else _kv(_mapping(obj["kv"], "kv")),
        policy_settings=_policy_settings(obj.get("policy_settings", {}), capacity_obj),
        fairness=None if obj.get("fairness") is None else fairness_from_json(obj["fairness"]),
    )
    return WorkloadManifest(online, _hidden(obj.get("fixture_only_hidden_truth"), set(ids)))


def _kv(obj: Mapping[str, Any]) -> KvSpec:
    unknown = set(obj) - set(_KV_FIELDS) - {"model_config"}
    if unknown:
        raise WorkloadError(f"kv: unknown field(s) {sorted(unknown)}")
    if "model_config" in obj:
        obj = {**obj, "bytes_per_row": _bytes_per_row_from(obj)}
    values = {
        "num_blocks": _field(obj, "num_blocks", "kv", int),
        "block_size": _field(obj, "block_size", "kv", int, 16),
        "num_host_blocks": _field(obj, "num_host_blocks", "kv", int, 0),
        "bytes_per_row": _field(obj, "bytes_per_row", "kv", int, None),
        "admission": _field(obj, "admission", "kv", str, "none"),
        "preemption_mode": _field(obj, "preemption_mode", "kv", str, "recompute"),
    }
    try:
        return KvSpec(**values)
    except ValueError as exc:
        raise WorkloadError(str(exc)) from None


def fairness_from_json(raw: Any) -> FairnessSpec:
    """The ``fairness`` section (0x09A F52): w_p, w_q and client weights."""
    obj = _mapping(raw, "fairness")
    unknown = set(obj) - {"prompt_weight", "output_weight", "client_weights",
                          "starvation_horizon"}
    if unknown:
        raise WorkloadError(f"fairness: unknown field(s) {sorted(unknown)}")
    weights = _mapping(obj.get("client_weights", {}), "fairness.client_weights")
    values = []
    for name in ("prompt_weight", "output_weight"):
        value = obj.get(name, 1.0)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise WorkloadError(f"fairness.{name}: must be a number")
        values.append(float(value))
    for client, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise WorkloadError(f"fairness.client_weights[{client!r}]: must be a number")
    horizon = _field(obj, "starvation_horizon", "fairness", float, None)
    try:
        return FairnessSpec(values[0], values[1],
                            tuple(sorted((str(c), float(w)) for c, w in weights.items())),
                            horizon)
    except ValueError as exc:
        raise WorkloadError(str(exc)) from None


def fairness_to_json(spec: FairnessSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"prompt_weight": spec.prompt_weight,
                           "output_weight": spec.output_weight,
                           "client_weights": dict(spec.client_weights)}
    if spec.starvation_horizon is not None:
        out["starvation_horizon"] = spec.starvation_horizon
    return out


def _mapping(raw: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise WorkloadError(f"{where}: must be an object")
    return raw


def _field(obj: Mapping[str, Any], name: str, where: str, kind: type, default: Any = ...) -> Any:
    if name not in obj:
        if default is ...:
            raise WorkloadError(f"{where}.{name}: missing")
        return default
    value = obj[name]
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if ok and kind is float and not math.isfinite(value):
        raise WorkloadError(f"{where}.{name}: must be a finite number, got {value!r}")
    if not ok:
        raise WorkloadError(f"{where}.{name}: must be {kind.__name__}, got {value!r}")
    return value


def _policy_settings(raw: Any, capacity: Mapping[str, Any]) -> dict[str, Any]:
    """The ``policy_settings`` section plus the deprecated capacity knobs.
    Values are scalars; each policy checks the ones it takes when made."""
    settings = dict(_mapping(raw, "policy_settings"))
    for name, value in settings.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise WorkloadError(f"policy_settings.{name}: must be a number or a string")
    for name in LEGACY_CAPACITY_KNOBS:
        if name in capacity:
            if name in settings:
                raise WorkloadError(f"capacity.{name}: also set in policy_settings; keep that one "
                                    "(capacity policy knobs are deprecated)")
            settings[name] = _field(capacity, name, "capacity", int)
    return settings


def _capacity(obj: Mapping[str, Any]) -> Capacity:
    unknown = set(obj) - set(_CAPACITY_FIELDS) - set(LEGACY_CAPACITY_KNOBS)
    if unknown:
        raise WorkloadError(f"capacity: unknown field(s) {sorted(unknown)}")
    values = {name: _field(obj, name, "capacity", int, None) for name in _CAPACITY_FIELDS}
    for name in ("token_budget", "sequence_budget"):
        if values[name] is None:
            raise WorkloadError(f"capacity.{name}: missing")
    try:
        return Capacity(**values)
    except ValueError as exc:
        raise WorkloadError(str(exc)) from None


def _request(raw: Any, where: str) -> RequestSpec:
    obj = _mapping(raw, where)
    unknown = set(obj) - _REQUEST_FIELDS
    if unknown:
        raise WorkloadError(f"{where}: unknown field(s) {sorted(unknown)}")
    prompt = obj.get("prompt_tokens")
    token_ids: tuple[int, ...] | None = None
    if isinstance(prompt, list):
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
            raise WorkloadError(f"{where}.prompt_tokens: token ids must be integers >= 0")
        token_ids = tuple(prompt)
        num_prompt = len(prompt)
    else:
        num_prompt = _field(obj, "prompt_tokens", where, int)
    slo = None
    if "slo" in obj:
        slo_obj = _mapping(obj["slo"], f"{where}.slo")
        unknown_slo = set(slo_obj) - {"ttft_ms", "tbt_ms"}
        if unknown_slo:
            raise WorkloadError(f"{where}.slo: unknown field(s) {sorted(unknown_slo)}")
        slo = SloTargets(_field(slo_obj, "ttft_ms", f"{where}.slo", float, None),
                         _field(slo_obj, "tbt_ms", f"{where}.slo", float, None))
    try:
        return RequestSpec(
            request_id=_field(obj, "request_id", where, str),
            arrival=_field(obj, "arrival", where, float),
            num_prompt_tokens=num_prompt,
            max_output_tokens=_field(obj, "max_output_tokens", where, int),
            client_id=_field(obj, "client_id", where, str, "default"),
            priority=_field(obj, "priority", where, int, 0),
            prompt_token_ids=token_ids,
            slo=slo,
            output_forecast=_field(obj, "output_forecast", where, float, None),
            output_forecast_p90=_field(obj, "output_forecast_p90", where, float, None),
        )
    except ValueError as exc:
        raise WorkloadError(f"{where}: {exc}") from None


def _hidden(raw: Any, ids: set[str]) -> HiddenTruth:
    if raw is None:
        return HiddenTruth({})
    obj = _mapping(raw, "fixture_only_hidden_truth")
    unknown = set(obj) - {"realized_output_tokens", "injected_failures"}
    if unknown:
        raise WorkloadError(f"fixture_only_hidden_truth: unknown field(s) {sorted(unknown)}")
    lengths = _mapping(obj.get("realized_output_tokens", {}),
                       "fixture_only_hidden_truth.realized_output_tokens")
    out: dict[str, int] = {}
    for rid, n in lengths.items():
        where = f"fixture_only_hidden_truth.realized_output_tokens.{rid}"
        if rid not in ids:
            raise WorkloadError(f"{where}: no such request")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise WorkloadError(f"{where}: must be an integer >= 1")
        out[rid] = n
    return HiddenTruth(out, _injected_failures(obj.get("injected_failures", []), ids))


def _injected_failures(raw: Any, ids: set[str]) -> frozenset[tuple[str, int]]:
    """``[{"request_id": str, "decision_id": int}]``: that decision's work
    for the request fails in the simulated executor (fault injection)."""
    where = "fixture_only_hidden_truth.injected_failures"
    if not isinstance(raw, list):
        raise WorkloadError(f"{where}: must be a list")
    out = set()
    for i, item in enumerate(raw):
        obj = _mapping(item, f"{where}[{i}]")
        if set(obj) != {"request_id", "decision_id"}:
            raise WorkloadError(f"{where}[{i}]: needs exactly request_id and decision_id")
        rid = _field(obj, "request_id", f"{where}[{i}]", str)
        decision = _field(obj, "decision_id", f"{where}[{i}]", int)
        if rid not in ids:
            raise WorkloadError(f"{where}[{i}].request_id: no such request")
        if decision < 0:
            raise WorkloadError(f"{where}[{i}].decision_id: must be >= 0")
        out.add((rid, decision))
    return frozenset(out)


def online_to_json(workload: OnlineWorkload) -> dict[str, Any]:
    """The online projection as JSON (decision-log header): no hidden truth."""
    cap = workload.capacity
    return {
        "workload_id": workload.workload_id,
        "clock": workload.clock,
        "capacity": {n: getattr(cap, n) for n in _CAPACITY_FIELDS if getattr(cap, n) is not None},
        "requests": [_request_to_json(r) for r in workload.requests],
        **({} if workload.kv is None else {"kv": _kv_to_json(workload.kv)}),
        **({"policy_settings": dict(workload.policy_settings)} if workload.policy_settings else {}),
        **({} if workload.fairness is None
           else {"fairness": fairness_to_json(workload.fairness)}),
    }


def _bytes_per_row_from(obj: Mapping[str, Any]) -> int:
    """delta_KV_row = 2 x layers x kv_heads x head_dim x dtype bytes (0x05),
    from an inline Hugging Face config object; it must agree with an explicit
    bytes_per_row when both are given."""
    config = _mapping(obj["model_config"], "kv.model_config")
    try:
        derived = kv_row_abi_from_hf_config(config, profile_id="workload").bytes_per_row
    except (ValueError, KeyError) as exc:
        raise WorkloadError(f"kv.model_config: {exc}") from None
    declared = obj.get("bytes_per_row")
    if declared is not None and declared != derived:
        raise WorkloadError(
            f"kv.bytes_per_row: {declared} disagrees with kv.model_config ({derived})")
    return derived


def _kv_to_json(kv: KvSpec) -> dict[str, Any]:
    return {name: getattr(kv, name) for name in _KV_FIELDS if getattr(kv, name) is not None}


def _request_to_json(r: RequestSpec) -> dict[str, Any]:
    out: dict[str, Any] = {
        "request_id": r.request_id, "arrival": r.arrival,
        "prompt_tokens": list(r.prompt_token_ids) if r.prompt_token_ids else r.num_prompt_tokens,
        "max_output_tokens": r.max_output_tokens, "client_id": r.client_id,
        "priority": r.priority,
    }
    if r.slo is not None:
        out["slo"] = {k: v for k, v in (("ttft_ms", r.slo.ttft_ms), ("tbt_ms", r.slo.tbt_ms))
                      if v is not None}
    for name in ("output_forecast", "output_forecast_p90"):
        if getattr(r, name) is not None:
            out[name] = getattr(r, name)
    return out
