"""What ``compare`` reads: run directories (their report.json), a single
report.json, or a result registry (``{"schema": REGISTRY_SCHEMA,
"results": [...]}``, one run per record with its registry flags, e.g.
source-reported headlines)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from iterserve.lab.compare import Run
from iterserve.lab.coordinates import CoordinateError
from iterserve.lab.run_record import records_of_report
from iterserve.lab.source_registry import entry_from_json
from iterserve.records.input_files import MAX_LOG_BYTES, read_input_bytes

REGISTRY_SCHEMA = "iterserve.lab.result_registry/v1"


def load_runs(path: Path) -> list[Run]:
    """The runs at ``path``; raises FileNotFoundError or CoordinateError
    naming the file."""
    file = path / "report.json" if path.is_dir() else path
    if not file.exists():
        raise FileNotFoundError(f"{file}: no such file")
    try:
        document: Any = json.loads(read_input_bytes(file, CoordinateError, MAX_LOG_BYTES))
    except json.JSONDecodeError as exc:
        raise CoordinateError(f"{file}: not valid JSON ({exc.msg})") from None
    if isinstance(document, dict) and document.get("schema") == REGISTRY_SCHEMA:
        return _registry_runs(document, str(file))
    name = path.name if path.is_dir() else path.parent.name
    label = f"{name}: {document.get('label', '?')}" if isinstance(document, dict) else name
    return [Run(label, tuple(records_of_report(document, label, str(file))))]


def _registry_runs(document: dict[str, Any], where: str) -> list[Run]:
    results = document.get("results")
    if not isinstance(results, list) or not results:
        raise CoordinateError(f"{where}: a registry needs a non-empty results list")
    runs = []
    for i, obj in enumerate(results):
        record, flags = entry_from_json(obj, f"{where} results[{i}]")
        runs.append(Run(record.label, (record,), flags))
    return runs
