"""Writing workload documents: one deterministic text per document.

The header fields come first, then one request per line, then the hidden
truth, so a 100,000-request file stays readable with ``head`` and diffs by
request. Same document, same bytes.
"""

from __future__ import annotations

import json
from typing import Any

_HIDDEN = "fixture_only_hidden_truth"


def dumps_workload(document: dict[str, Any]) -> str:
    lines = ["{"]
    items = [(k, v) for k, v in document.items() if k not in ("requests", _HIDDEN)]
    for key, value in items:
        lines.append(f" {json.dumps(key)}: {json.dumps(value, sort_keys=True)},")
    requests = document.get("requests", [])
    lines.append(' "requests": [')
    lines.extend(f"  {json.dumps(r)}{',' if i + 1 < len(requests) else ''}"
                 for i, r in enumerate(requests))
    hidden = document.get(_HIDDEN)
    lines.append(" ]" + ("," if hidden is not None else ""))
    if hidden is not None:
        lines.append(f" {json.dumps(_HIDDEN)}: {json.dumps(hidden)}")
    lines.append("}")
    return "\n".join(lines) + "\n"
