"""Policy settings: each policy's frozen config is validated when the policy
is made, never mid-run. A bad setting raises :class:`PolicyConfigError`
with one line naming the policy and the field.

Settings reach a policy from, lowest precedence first: the workload's
``policy_settings`` (and its deprecated ``capacity`` knobs, which the codec
reads into that section), the legacy ``capacity.kv_rows`` for ORCA's
n_slots, and the caller's overrides (CLI ``--policy-setting NAME=VALUE``).
A workload's settings are suggestions for whichever policy runs it: a
policy takes the names its config has and leaves the rest.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")


class PolicyConfigError(ValueError):
    """A policy setting is unknown, missing, of the wrong type or out of range."""


@dataclasses.dataclass(frozen=True, slots=True)
class NoSettings:
    """The config of a policy that takes no settings."""


def flag(default: int) -> Any:
    """A config field that is a switch: 1 on, 0 off (integers, so a
    decision log header records it and ``--policy-setting NAME=0`` sets it)."""
    return dataclasses.field(default=default, metadata={"flag": True})


def optional(unset: str, default: None = None) -> Any:
    """A config field that may be left out (None), with what that means
    (the policies reference prints it)."""
    return dataclasses.field(default=default, metadata={"unset": unset})


@dataclass_transform(frozen_default=True, field_specifiers=(flag, optional))
def count_settings(cls: type[T]) -> type[T]:
    """``cls`` as a frozen slotted config whose fields are counts: integers
    >= 1 (None allowed where the default is None), or :func:`flag` switches
    (0 or 1), checked on construction; then the class's ``check_fields``
    (cross-field rules), when it has one."""

    def __post_init__(self: object) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.metadata.get("flag"):
                check_flag(f.name, getattr(self, f.name))
            else:
                check_count(f.name, getattr(self, f.name), optional=f.default is None)
        check_fields = getattr(self, "check_fields", None)
        if check_fields is not None:
            check_fields()

    cls.__post_init__ = __post_init__  # type: ignore[attr-defined]
    return dataclasses.dataclass(frozen=True, slots=True)(cls)


def check_count(name: str, value: object, *, optional: bool = False) -> None:
    """A config check: ``value`` must be an integer >= 1 (or None when
    ``optional``); the error names the field."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyConfigError(f"setting {name}: must be an integer >= 1, got {value!r}")
    if value < 1:
        raise PolicyConfigError(f"setting {name}: must be >= 1, got {value}")


def check_flag(name: str, value: object) -> None:
    """A config check: ``value`` must be 0 (off) or 1 (on); the error names the field."""
    if isinstance(value, bool) or not isinstance(value, int) or value not in (0, 1):
        raise PolicyConfigError(f"setting {name}: must be 0 (off) or 1 (on), got {value!r}")


def setting_names(config_type: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(config_type))


def build_config(policy_id: str, config_type: type, settings: Mapping[str, Any]) -> Any:
    """``config_type(**settings)``, naming the field of any unknown or
    missing setting; the config's own checks name a bad value."""
    names = setting_names(config_type)
    unknown = sorted(set(settings) - set(names))
    if unknown:
        takes = ", ".join(names) or "none"
        raise PolicyConfigError(
            f"policy {policy_id!r} has no setting {unknown[0]!r} (its settings: {takes})")
    required = [f.name for f in dataclasses.fields(config_type)
                if f.default is dataclasses.MISSING and f.name not in settings]
    if required:
        raise PolicyConfigError(
            f"policy {policy_id!r} needs setting {required[0]} (--policy-setting "
            f"{required[0]}=N, or the workload's policy_settings; deprecated: "
            f"capacity.{required[0]})")
    try:
        return config_type(**settings)
    except PolicyConfigError as exc:
        raise PolicyConfigError(f"policy {policy_id!r} {exc}") from None


def settings_json(config: object) -> dict[str, Any]:
    """The JSON-valued settings of a config (what a decision log header
    records so replay can make the same policy); non-JSON values such as a
    bound cost model travel in their own header field."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, f.name)
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            out[f.name] = value
    return out


def settings_of(policy: object) -> dict[str, Any]:
    """The JSON-valued settings a policy was made with ({} without a config)."""
    config = getattr(policy, "config", None)
    return {} if config is None else settings_json(config)


def parse_setting(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` from a CLI flag; VALUE is read as a JSON number when
    it is one, else kept as a string."""
    name, sep, raw = text.partition("=")
    if not sep or not name:
        raise PolicyConfigError(f"--policy-setting {text!r}: expected NAME=VALUE")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    if not isinstance(value, (int, float, str)) or isinstance(value, bool):
        value = raw
    return name, value


def parse_settings(texts: Iterable[str] | None) -> dict[str, Any]:
    return dict(parse_setting(text) for text in texts or ())


def setting_flag(text: str) -> tuple[str, Any]:
    """The ``--policy-setting`` flag type: a malformed flag is an argparse
    error, one line through the CLI's parser, before anything runs. Names
    and values are checked by the policy when it is made."""
    try:
        return parse_setting(text)
    except PolicyConfigError:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}") from None


def add_policy_setting_flag(parser: argparse.ArgumentParser) -> None:
    """``--policy-setting NAME=VALUE`` (repeatable); ``args.policy_setting``
    holds ``(name, value)`` pairs, later ones winning (``dict(...)``)."""
    parser.add_argument(
        "--policy-setting", action="append", type=setting_flag, default=[], metavar="NAME=VALUE",
        help="a setting of the chosen policy, e.g. chunk_size=4 (repeatable; overrides the "
             "workload's policy_settings; `iterserve policies NAME` lists them)")
