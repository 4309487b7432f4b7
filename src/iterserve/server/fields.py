"""Unknown request fields, vLLM's rule: ignored with one logged warning per
field name and counted; or, with strict fields, a 400 naming the first one.

The counts live in :attr:`FieldPolicy.ignored` (a ``Counter`` keyed by the
field's path without list indices, e.g. ``messages.*.audio``); the app puts
the policy on ``app.state.fields`` so a metrics exporter can read it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator

from pydantic import BaseModel

from iterserve.server.errors import APIError
from iterserve.server.protocol import SamplingFields, refused_field

logger = logging.getLogger("iterserve.server")


def unknown_field_paths(body: BaseModel, prefix: str = "") -> Iterator[str]:
    """Dotted paths of the fields no model declares, nested models and
    lists of models included (``messages.0.audio``)."""
    for name in body.model_extra or {}:
        yield prefix + name
    for name in type(body).model_fields:
        value = getattr(body, name)
        if isinstance(value, BaseModel):
            yield from unknown_field_paths(value, f"{prefix}{name}.")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, BaseModel):
                    yield from unknown_field_paths(item, f"{prefix}{name}.{index}.")


def field_name(path: str) -> str:
    """A path with its list indices as ``*``: one name per kind of field."""
    return ".".join("*" if part.isdigit() else part for part in path.split("."))


#: distinct ignored field names logged and counted by name; the names come
#: from clients, so later ones are counted together as OTHER_FIELDS
MAX_NAMED_FIELDS = 64
OTHER_FIELDS = "other"


class FieldPolicy:
    """What the app does with the fields of a parsed body (event loop only)."""

    def __init__(self, is_strict: bool = False, max_named: int = MAX_NAMED_FIELDS) -> None:
        self.is_strict = is_strict
        self.max_named = max_named
        self.ignored: Counter[str] = Counter()  # requests that sent each ignored field

    def check(self, body: BaseModel) -> None:
        """Refuse (strict) or note the unknown fields; refuse a declared
        field whose value this server cannot honour."""
        paths = list(unknown_field_paths(body))
        if paths and self.is_strict:
            raise APIError(400, f"unknown field {paths[0]!r}", param=paths[0])
        for name in dict.fromkeys(field_name(p) for p in paths):
            self.ignored[self._counted_name(name)] += 1
        if isinstance(body, SamplingFields):
            refused = refused_field(body)
            if refused is not None:
                raise APIError(400, refused[1], param=refused[0])

    def _counted_name(self, name: str) -> str:
        if name in self.ignored:
            return name
        if len(self.ignored) < self.max_named:
            logger.warning("ignoring the unknown request field %r (warned once per field)", name)
            return name
        if OTHER_FIELDS not in self.ignored:
            logger.warning("ignoring the unknown request field %r; further new unknown fields "
                           "are counted as %r and not logged", name, OTHER_FIELDS)
        return OTHER_FIELDS
