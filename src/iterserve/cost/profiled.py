"""The profiled cost model: an iteration-time model fitted to measurements
of the real executor (``iterserve profile``), and its JSON file.

duration_ms = max(floor_ms, intercept + sum(coefficient * feature)) over the
:class:`~iterserve.cost.protocol.BatchShape` features. The file records where
the numbers came from (0x0E coordinates: the model's config hash, dtype,
threads, torch version, CPU and machine) and the fit error on held-out
iterations. Loading validates every field; an error names the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iterserve.cost.protocol import BatchShape, CostModelError, RowQueries
from iterserve.records.input_files import MAX_DOCUMENT_BYTES, read_input_bytes

PROFILE_FORMAT = "iterserve-profile-v2"
FEATURES = ("num_prefill_rows", "num_decode_rows", "num_attended_tokens", "num_sequences",
            "multi_sequence", "num_decode_context_tokens")
# a v1 file predates the decode-context term: it loads as the same model with that term 0
V1_FORMAT = "iterserve-profile-v1"
V1_FEATURES = FEATURES[:5]
PROVENANCE_FIELDS = ("config_hash", "dtype", "num_threads", "torch_version", "cpu_model",
                     "machine")
# written by newer profiles, read where present: the Python that ran the engine (its
# per-iteration overhead differs by 10-20 % between interpreter builds on one CPU)
OPTIONAL_PROVENANCE_FIELDS = ("python",)
FIT_FIELDS = ("num_train", "num_heldout", "mean_relative_error", "max_relative_error")


def feature_values(shape: BatchShape) -> tuple[float, ...]:
    """The shape as the model's features (FEATURES order). ``multi_sequence``
    is 1 when the batch packs several sequences: one segment is measurably
    cheaper than the linear trend of two to eight."""
    return (shape.num_prefill_rows, shape.num_decode_rows, shape.num_attended_tokens,
            shape.num_sequences, 1.0 if shape.num_sequences > 1 else 0.0,
            shape.num_decode_context_tokens)


@dataclass(frozen=True, slots=True)
class FitError:
    """Relative error |predicted - measured| / measured on held-out iterations."""

    num_train: int
    num_heldout: int
    mean_relative_error: float
    max_relative_error: float


@dataclass(frozen=True, slots=True)
class CostProfile:
    """A fitted model and its coordinates (the contents of a profile file)."""

    intercept_ms: float
    coefficients_ms: tuple[float, ...]  # one per FEATURES entry
    floor_ms: float
    # PROVENANCE_FIELDS, then the OPTIONAL_PROVENANCE_FIELDS present, in that order
    provenance: tuple[tuple[str, str], ...]
    fit: FitError

    def predict_ms(self, shape: BatchShape) -> float:
        features = feature_values(shape)
        linear = self.intercept_ms + sum(c * x for c, x in zip(self.coefficients_ms, features,
                                                              strict=True))
        return max(self.floor_ms, linear)

    def scaled(self, factor: float) -> CostProfile:
        """Every duration times ``factor`` (a machine measured faster or slower
        than when the profile was fitted); the fit error is the original's."""
        if not (math.isfinite(factor) and factor > 0):
            raise CostModelError(f"scale factor must be finite and > 0, got {factor!r}")
        return CostProfile(self.intercept_ms * factor,
                           tuple(c * factor for c in self.coefficients_ms),
                           self.floor_ms * factor, self.provenance, self.fit)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": PROFILE_FORMAT,
            "provenance": dict(self.provenance),
            "intercept_ms": self.intercept_ms,
            "coefficients_ms": dict(zip(FEATURES, self.coefficients_ms, strict=True)),
            "floor_ms": self.floor_ms,
            "fit": {name: getattr(self.fit, name) for name in FIT_FIELDS},
        }


@dataclass(frozen=True, slots=True)
class ProfiledIterationCost(RowQueries):
    """``profile:PATH``: the model a profile file describes."""

    path: str
    profile: CostProfile

    @property
    def model_id(self) -> str:
        coords = dict(self.profile.provenance)
        return (f"profiled-iteration-v1(config_hash={coords['config_hash'][:12]},"
                f"dtype={coords['dtype']},threads={coords['num_threads']})")

    @property
    def spec(self) -> str:
        return f"profile:{self.path}"

    def predict_batch_ms(self, shape: BatchShape) -> float:
        return self.profile.predict_ms(shape)


def load_profiled_cost(path: str) -> ProfiledIterationCost:
    """Read and validate a profile file; errors are one line naming the field."""
    data = read_input_bytes(Path(path), CostModelError, MAX_DOCUMENT_BYTES, "profile ")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CostModelError(f"profile {path}: not UTF-8 text (byte {exc.start})") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CostModelError(f"profile {path}: not JSON: {exc.msg} (line {exc.lineno})") from None
    try:
        return ProfiledIterationCost(path, profile_from_json(obj))
    except CostModelError as exc:
        raise CostModelError(f"profile {path}: {exc}") from None


def profile_from_json(obj: object) -> CostProfile:
    top = _mapping(obj, "profile")
    if top.get("format") not in (PROFILE_FORMAT, V1_FORMAT):
        raise CostModelError(f"format: expected {PROFILE_FORMAT!r} (or {V1_FORMAT!r}), "
                             f"got {top.get('format')!r}")
    names = V1_FEATURES if top["format"] == V1_FORMAT else FEATURES
    provenance = _mapping(top.get("provenance"), "provenance")
    coords = tuple((name, _text(provenance, name, "provenance")) for name in (
        *PROVENANCE_FIELDS, *(name for name in OPTIONAL_PROVENANCE_FIELDS if name in provenance)))
    coefficients = _mapping(top.get("coefficients_ms"), "coefficients_ms")
    unknown = sorted(set(coefficients) - set(names))
    if unknown:  # a term the model would otherwise leave out of every duration
        raise CostModelError(f"coefficients_ms: unknown feature(s) {unknown}; "
                             f"known: {list(names)}")
    fit = _mapping(top.get("fit"), "fit")
    floor_ms = _number(top, "floor_ms", "")
    if floor_ms <= 0:
        raise CostModelError(f"floor_ms: must be > 0, got {floor_ms!r}")
    return CostProfile(
        intercept_ms=_number(top, "intercept_ms", ""),
        coefficients_ms=tuple(_number(coefficients, name, "coefficients_ms")
                              for name in names) + (0.0,) * (len(FEATURES) - len(names)),
        floor_ms=floor_ms,
        provenance=coords,
        fit=FitError(int(_number(fit, "num_train", "fit")), int(_number(fit, "num_heldout", "fit")),
                     _number(fit, "mean_relative_error", "fit"),
                     _number(fit, "max_relative_error", "fit")),
    )


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise CostModelError(f"{field}: expected an object, got {type(value).__name__}")
    return value


def _number(obj: Mapping[str, Any], name: str, parent: str) -> float:
    field = f"{parent}.{name}" if parent else name
    value = obj.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise CostModelError(f"{field}: expected a finite number, got {value!r}")
    return float(value)


def _text(obj: Mapping[str, Any], name: str, parent: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str | int) or isinstance(value, bool) or value == "":
        raise CostModelError(f"{parent}.{name}: expected a non-empty string, got {value!r}")
    return str(value)
