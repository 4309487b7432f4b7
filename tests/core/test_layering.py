"""Layering (DESIGN "Layers", STYLE habit 12): the scheduler's code path
imports no torch, so its tests run in milliseconds and a policy cannot reach
tensors or devices."""

from __future__ import annotations

import subprocess
import sys

from .helpers import REPO_ROOT

SCHEDULER_MODULES = (
    "iterserve.records", "iterserve.policies", "iterserve.engine.loop",
    "iterserve.sim.executor", "iterserve.sim.replay", "iterserve.engine.decision_log",
    "iterserve.records.workload", "iterserve.sim.factory",
)


def test_scheduler_path_does_not_import_torch():
    script = (
        "import importlib, sys\n"
        f"for name in {SCHEDULER_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
