"""JSON Lines input: each non-blank line of a file as one JSON object, with
its line number. One reader for the files a user hands in line by line
(traces, metric events), so a bad line reads the same everywhere:
``PATH:LINE: not valid JSON (...)``, ``PATH:LINE: must be a JSON object``,
``PATH:LINE: not UTF-8 text``, each raised as the caller's own error type.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def json_objects(path: str | Path, error: type[Exception]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of ``path``, in file
    order, one at a time (the file is never held whole); a line that is not
    UTF-8, not JSON or not an object raises ``error`` naming path and line."""
    with Path(path).open("rb") as stream:
        for number, raw in enumerate(stream, start=1):
            if not raw.strip():
                continue
            where = f"{path}:{number}"
            try:
                obj = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise error(f"{where}: not UTF-8 text") from None
            except json.JSONDecodeError as exc:
                raise error(f"{where}: not valid JSON ({exc.msg})") from None
            except (ValueError, RecursionError) as exc:  # e.g. an integer past int's limit
                raise error(f"{where}: not valid JSON ({exc})") from None
            if not isinstance(obj, dict):
                raise error(f"{where}: must be a JSON object")
            yield number, obj
