"""Workload files (JSON): strict loading with one-line errors naming the field.

The schema is checked once, by ``records/workload_schema.py`` (types, ranges,
the size limits of ``records/limits.py``); this module reads the file and
builds the records. Shape (documented in docs/workloads.md):

    {
      "workload_id": str,
      "clock": "iteration" | "ms",
      "capacity": {"max_num_batched_tokens": int, "max_num_seqs": int, "kv_rows": int?},
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
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iterserve.records.input_files import MAX_DOCUMENT_BYTES, read_input_bytes
from iterserve.records.kv_abi import kv_row_abi_from_hf_config
from iterserve.records.limits import MAX_BYTES_PER_ROW
from iterserve.records.preemption import (
    DEPRECATED_SWAP_NAME,
    FallbackMode,
    PreemptionCostSpec,
    parse_kv_preemption_mode,
)
from iterserve.records.spec import (
    DEFAULT_EXTENSION_WAIT_MAX_ITERATIONS,
    Capacity,
    FairnessSpec,
    HiddenTruth,
    KvSpec,
    OnlineWorkload,
    RequestSpec,
    SloTargets,
    WorkloadManifest,
)
from iterserve.records.vocabulary import CAPACITY_RENAMES, KV_RENAMES, warn_renamed
from iterserve.records.workload_schema import (
    CapacityDoc,
    FairnessDoc,
    HiddenDoc,
    KvDoc,
    RequestDoc,
    SchemaError,
    WorkloadDoc,
    field_path,
    validate_workload,
)

CLOCKS = ("iteration", "ms")
_CAPACITY_FIELDS = ("max_num_batched_tokens", "max_num_seqs", "kv_rows")
#: deprecated policy knobs still read from ``capacity`` into ``policy_settings``
LEGACY_CAPACITY_KNOBS = ("long_prefill_token_threshold", "chunk_size", "tau")
_KV_FIELDS = ("num_kv_blocks", "block_size", "num_host_blocks", "bytes_per_row", "admission",
              "preemption_mode")


class WorkloadError(ValueError):
    """A workload file is malformed; the message names the field."""


def load_workload(path: Path) -> WorkloadManifest:
    """Read and validate a workload file; every failure is a :class:`WorkloadError`."""
    return parse_workload(read_json_document(Path(path), WorkloadError))


def read_text_file(path: Path, error: type[ValueError], label: str = "") -> str:
    """A UTF-8 file's text; a missing, directory, non-UTF-8 or unreadable path
    raises ``error`` naming it (after ``label``, e.g. a flag name)."""
    data = read_input_bytes(path, error, MAX_DOCUMENT_BYTES, label)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{label}{path}: not UTF-8 text (byte {exc.start})") from None


def read_json_document(path: Path, error: type[ValueError]) -> Any:
    """One JSON document from a UTF-8 file; unreadable, non-UTF-8, malformed
    or too deeply nested input raises ``error`` naming the file."""
    text = read_text_file(path, error)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise error(f"{path}: JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python converts
        raise error(f"{path}: not valid JSON ({exc})") from None


def parse_workload(raw: Any) -> WorkloadManifest:
    """Validate ``raw`` against the one schema (``records/workload_schema.py``),
    then the cross-field rules; raises :class:`WorkloadError` naming the field."""
    try:
        doc = validate_workload(_with_current_names(raw))
    except SchemaError as exc:
        raise WorkloadError(str(exc)) from None
    except RecursionError:
        raise WorkloadError("workload: nested too deeply") from None
    requests = tuple(_request(item, f"requests[{i}]") for i, item in enumerate(doc.requests))
    ids = [r.request_id for r in requests]
    duplicates = sorted({rid for rid, n in Counter(ids).items() if n > 1})
    if duplicates:
        raise WorkloadError(f"workload: requests: duplicate request_id(s) {duplicates}")
    online = OnlineWorkload(
        workload_id=doc.workload_id,
        clock=doc.clock,
        capacity=_capacity(doc.capacity),
        requests=requests,
        kv=None if doc.kv is None else _kv(doc.kv),
        policy_settings=_policy_settings(doc),
        fairness=None if doc.fairness is None else _fairness(doc.fairness),
    )
    return WorkloadManifest(online, _hidden(doc.fixture_only_hidden_truth, set(ids)))


def _with_current_names(raw: Any) -> Any:
    """``raw`` with the older field names of its ``capacity`` and ``kv``
    sections read as today's (:mod:`records.vocabulary`), each with a
    deprecation warning; both spellings of one field is an error. In a file
    of the older names, ``capacity.max_num_seqs`` was the policy's running
    cap: it moves to ``policy_settings`` as before. ``raw`` is not changed."""
    if not isinstance(raw, dict):
        return raw
    out = dict(raw)
    capacity = raw.get("capacity")
    if isinstance(capacity, dict) and any(old in capacity for old in CAPACITY_RENAMES):
        capacity = dict(capacity)
        if "sequence_budget" in capacity and "max_num_seqs" in capacity:
            out["policy_settings"] = _with_setting(raw, "max_num_seqs",
                                                   capacity.pop("max_num_seqs"))
        out["capacity"] = _renamed(capacity, CAPACITY_RENAMES, "capacity")
    kv = raw.get("kv")
    if isinstance(kv, dict) and (any(old in kv for old in KV_RENAMES)
                                 or kv.get("preemption_mode") == DEPRECATED_SWAP_NAME):
        kv = _renamed(dict(kv), KV_RENAMES, "kv")
        if kv.get("preemption_mode") == DEPRECATED_SWAP_NAME:  # the one reader warns
            kv["preemption_mode"] = parse_kv_preemption_mode(DEPRECATED_SWAP_NAME).value
        out["kv"] = kv
    return out


def _renamed(section: dict[str, Any], renames: Mapping[str, str], where: str) -> dict[str, Any]:
    for old, new in renames.items():
        if old not in section:
            continue
        if new in section:
            raise WorkloadError(f"workload: {where}.{old} and {where}.{new} are one field; "
                                f"keep {new}")
        warn_renamed(f"workload field {where}.{old}", f"{where}.{new}")
        section[new] = section.pop(old)
    return section


def _with_setting(raw: dict[str, Any], name: str, value: Any) -> dict[str, Any]:
    settings = raw.get("policy_settings", {})
    if not isinstance(settings, dict):
        raise WorkloadError("workload: policy_settings: must be an object")
    return _with_legacy_knob(settings, name, value)


def _with_legacy_knob(settings: dict[str, Any], name: str, value: Any) -> dict[str, Any]:
    """``settings`` with the deprecated ``capacity.<name>`` knob added; one
    set in both places is an error."""
    if name in settings:
        raise WorkloadError(f"workload: capacity.{name}: also set in policy_settings; keep "
                            "that one (capacity policy knobs are deprecated)")
    return {**settings, name: value}


def _kv(doc: KvDoc) -> KvSpec:
    bytes_per_row = doc.bytes_per_row
    if doc.model_config_ is not None:
        bytes_per_row = _bytes_per_row_from(doc.model_config_, bytes_per_row)
    try:
        return KvSpec(doc.num_kv_blocks, doc.block_size, doc.num_host_blocks, bytes_per_row,
                      doc.admission, parse_kv_preemption_mode(doc.preemption_mode),
                      doc.plan_prefix_hits, FallbackMode(doc.preservation_fallback),
                      None if doc.preemption_cost is None
                      else PreemptionCostSpec(**doc.preemption_cost.model_dump()),
                      doc.extension_wait_max_iterations)
    except ValueError as exc:
        raise WorkloadError(f"workload: {exc}") from None


def _fairness(doc: FairnessDoc) -> FairnessSpec:
    """The ``fairness`` section (0x09A F52): w_p, w_q, client weights, guard horizon."""
    weights = tuple(sorted((client, float(w)) for client, w in doc.client_weights.items()))
    horizon = None if doc.starvation_horizon is None else float(doc.starvation_horizon)
    try:
        return FairnessSpec(float(doc.prompt_weight), float(doc.output_weight), weights, horizon)
    except ValueError as exc:
        raise WorkloadError(f"workload: {exc}") from None


def fairness_to_json(spec: FairnessSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"prompt_weight": spec.prompt_weight,
                           "output_weight": spec.output_weight,
                           "client_weights": dict(spec.client_weights)}
    if spec.starvation_horizon is not None:
        out["starvation_horizon"] = spec.starvation_horizon
    return out


def _policy_settings(doc: WorkloadDoc) -> dict[str, Any]:
    """The ``policy_settings`` section plus the deprecated capacity knobs (the
    schema checked their shapes; each policy checks the values it takes when
    it is made). A knob set in both places is an error."""
    settings: dict[str, Any] = dict(doc.policy_settings)
    for name in LEGACY_CAPACITY_KNOBS:
        value = getattr(doc.capacity, name)
        if value is not None:
            settings = _with_legacy_knob(settings, name, value)
    return settings


def _capacity(doc: CapacityDoc) -> Capacity:
    try:
        return Capacity(**{name: getattr(doc, name) for name in _CAPACITY_FIELDS})
    except ValueError as exc:
        raise WorkloadError(f"workload: {exc}") from None


def _request(doc: RequestDoc, where: str) -> RequestSpec:
    prompt = doc.prompt_tokens
    token_ids = tuple(prompt) if isinstance(prompt, list) else None
    slo = None if doc.slo is None else SloTargets(doc.slo.ttft_ms, doc.slo.tbt_ms)
    try:
        return RequestSpec(
            request_id=doc.request_id,
            arrival=float(doc.arrival),
            num_prompt_tokens=len(prompt) if isinstance(prompt, list) else prompt,
            max_output_tokens=doc.max_output_tokens,
            client_id=doc.client_id,
            priority=doc.priority,
            prompt_token_ids=token_ids,
            slo=slo,
            output_forecast=_as_float(doc.output_forecast),
            output_forecast_p90=_as_float(doc.output_forecast_p90),
        )
    except ValueError as exc:
        raise WorkloadError(f"workload: {where}: {exc}") from None


def _as_float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _hidden(doc: HiddenDoc | None, ids: set[str]) -> HiddenTruth:
    if doc is None:
        return HiddenTruth({})
    for rid in doc.realized_output_tokens:
        if rid not in ids:
            where = field_path(("fixture_only_hidden_truth", "realized_output_tokens", rid))
            raise WorkloadError(f"workload: {where}: no such request")
    faults = set()
    for i, fault in enumerate(doc.injected_failures):
        if fault.request_id not in ids:
            where = f"fixture_only_hidden_truth.injected_failures[{i}].request_id"
            raise WorkloadError(f"workload: {where}: no such request")
        faults.add((fault.request_id, fault.decision_id))
    return HiddenTruth(dict(doc.realized_output_tokens), frozenset(faults))


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


def _bytes_per_row_from(config: dict[str, Any], declared: int | None) -> int:
    """delta_KV_row = 2 x layers x kv_heads x head_dim x dtype bytes (0x05),
    from an inline Hugging Face config object; it must agree with an explicit
    bytes_per_row when both are given."""
    try:
        derived = kv_row_abi_from_hf_config(config, profile_id="workload").bytes_per_row
    except (ValueError, KeyError, TypeError, ArithmeticError) as exc:
        raise WorkloadError(f"workload: kv.model_config: {exc}") from None
    if not 1 <= derived <= MAX_BYTES_PER_ROW:
        raise WorkloadError(f"workload: kv.model_config: bytes per row {derived} outside "
                            f"[1, {MAX_BYTES_PER_ROW}] (documented limit)")
    if declared is not None and declared != derived:
        raise WorkloadError(
            f"workload: kv.bytes_per_row: {declared} disagrees with kv.model_config ({derived})")
    return derived


def _kv_to_json(kv: KvSpec) -> dict[str, Any]:
    fields = {name: getattr(kv, name) for name in _KV_FIELDS if getattr(kv, name) is not None}
    fields["preemption_mode"] = kv.preemption_mode.value  # the file's spelling
    if kv.plan_prefix_hits:  # absent when off: older workload files read as before
        fields["plan_prefix_hits"] = True
    if kv.preservation_fallback is not FallbackMode.RECOMPUTE:  # absent at the default, likewise
        fields["preservation_fallback"] = kv.preservation_fallback.value
    if kv.extension_wait_max_iterations != DEFAULT_EXTENSION_WAIT_MAX_ITERATIONS:  # likewise
        fields["extension_wait_max_iterations"] = kv.extension_wait_max_iterations
    if kv.preemption_cost is not None:
        cost = kv.preemption_cost
        fields["preemption_cost"] = {name: getattr(cost, name) for name in (
            "recompute_cost_model", "write_bytes_per_s", "read_bytes_per_s",
            "staging_overhead_ms", "queue_overhead_ms")}
    return fields


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
