"""Errors raised while loading a local checkpoint.

Every failure names what is wrong (the file, the architecture, the config key)
so that `iterserve serve --model DIR` fails with an actionable message.
"""

from __future__ import annotations


class CheckpointError(ValueError):
    """A local checkpoint cannot be loaded; the message names the cause."""


class UnsupportedArchitectureError(CheckpointError):
    """`config.json` names an architecture this model layer does not implement."""

    def __init__(self, architecture: str, supported: tuple[str, ...]) -> None:
        self.architecture = architecture
        self.supported = supported
        super().__init__(
            f"unsupported architecture {architecture!r}; supported: {', '.join(supported)}"
        )


class MissingCheckpointFileError(CheckpointError):
    """A file the checkpoint needs is absent (config, weights, shard, tokenizer)."""

    def __init__(self, path: str, hint: str = "") -> None:
        self.path = path
        suffix = f" ({hint})" if hint else ""
        super().__init__(f"missing checkpoint file: {path}{suffix}")


class UnsupportedConfigError(CheckpointError):
    """A config value is outside what the packed forward implements (e.g. rope_scaling)."""
