"""Where a model comes from: a local directory, or a hub id already in the local
Hugging Face cache. Nothing is ever downloaded.

`resolve_model(argument)` is the one place every entry point (`generate`,
`serve`, `profile`, `LLM(...)`) turns what the user typed into a checkpoint
directory. An existing directory is taken as it is. Anything else shaped
like a hub id (`org/name`) is looked up with huggingface_hub's
`snapshot_download(..., local_files_only=True)`: the snapshot that
`refs/main` names under `<cache>/models--org--name/`, as `hf download`
(or transformers) left it. That is the behaviour of `HF_HUB_OFFLINE=1`
whatever the environment says: no request leaves the machine.

The cache directory is read from the environment on every call, in
huggingface_hub's order (`HF_HUB_CACHE`, the older `HUGGINGFACE_HUB_CACHE`,
`$HF_HOME/hub`, `$XDG_CACHE_HOME/huggingface/hub`, `~/.cache/huggingface/hub`)
and passed explicitly, because huggingface_hub reads it once when imported.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from iterserve.model.errors import CheckpointError

#: `org/name`: one slash, hub-legal characters, no path-like start ("./", "/", "~").
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True, slots=True)
class ModelSource:
    """A checkpoint directory and the name it is served under: the hub id for a
    cached hub model, else the directory's own name."""

    path: Path
    name: str


class ModelNotFoundError(CheckpointError):
    """The argument is neither a directory nor a hub id in the local cache."""


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache this process would use (environment read per call)."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(explicit)).expanduser()
    home = os.environ.get("HF_HOME")
    if not home:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        home = str(Path(xdg) / "huggingface")
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def is_hub_id(argument: str) -> bool:
    return bool(HUB_ID.match(argument)) and ".." not in argument


def resolve_model(argument: str | Path) -> ModelSource:
    """The checkpoint `argument` names: an existing directory, else a hub id in
    the local cache. Raises ModelNotFoundError naming the path or the cache
    directory that was searched."""
    path = Path(argument)
    if path.is_dir():
        return ModelSource(path, path.resolve().name)
    text = str(argument)
    if path.exists():
        raise ModelNotFoundError(f"{text}: not a directory (a checkpoint is a directory "
                                 "holding config.json)")
    if not is_hub_id(text):
        raise ModelNotFoundError(f"{text}: no such directory (nor a hub id of the form org/name)")
    return ModelSource(_cached_snapshot(text, hub_cache_dir()), text)


def _cached_snapshot(repo_id: str, cache_dir: Path) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, IncompleteSnapshotError

    repo_dir = cache_dir / f"models--{repo_id.replace('/', '--')}"
    try:
        return Path(snapshot_download(repo_id, cache_dir=cache_dir, local_files_only=True))
    except IncompleteSnapshotError as error:
        found = f"its snapshot is incomplete ({' '.join(str(error).split())[:200]})"
    except (HFValidationError, OSError):  # LocalEntryNotFoundError is an OSError
        found = ("it holds no snapshot that refs/main names" if repo_dir.is_dir()
                 else "no such folder")
    raise ModelNotFoundError(
        f"{repo_id}: no such directory, and not in the local Hugging Face cache: searched "
        f"{repo_dir}, {found}; iterserve downloads nothing: fetch it first "
        f"(`hf download {repo_id}`) or set HF_HOME / HF_HUB_CACHE to the cache that holds it")
