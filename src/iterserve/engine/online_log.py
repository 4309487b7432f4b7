"""The decision log of an online run (issue 10).

An online engine learns its requests as they arrive, but the log's header
holds the whole workload and every line is chained to the one before it
(format 3). So the body lines are kept, in order, as the ordinary
:class:`DecisionLogWriter` makes them (rejections attached, same fields);
:meth:`BufferedDecisionLog.text` then writes the header with the workload
declared so far and chains the kept lines after it. ``iterserve replay``
reads the result like any other log.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from iterserve.engine.decision_log import DecisionLogWriter, GateRecord
from iterserve.records.spec import OnlineWorkload
from iterserve.records.state import CapacityFacts, SchedulerState


class BufferedDecisionLog(DecisionLogWriter):
    """A decision-log observer whose lines wait for the final header."""

    def __init__(self, workload: OnlineWorkload, capacity: CapacityFacts, *,
                 gate: GateRecord | None, policy_settings: Mapping[str, Any],
                 executor: str) -> None:
        self._lines: list[dict[str, Any]] = []
        self._capacity = capacity
        self._header: dict[str, Any] = {"gate": gate, "policy_settings": policy_settings,
                                        "executor": executor}
        super().__init__(io.StringIO(), workload, capacity, **self._header)
        self._lines.clear()  # the provisional header

    def _write(self, line: dict[str, Any]) -> None:
        if self._rejected:
            line["rejected"] = self._rejected
            self._rejected = []
        self._lines.append(line)

    def text(self, workload: OnlineWorkload, state: SchedulerState, *, is_done: bool) -> str:
        """The log so far: the header with ``workload``, the kept lines
        chained after it, and a summary line when the run is not done (or
        rejections are not yet written). Keeps nothing it writes."""
        out = io.StringIO()
        writer = DecisionLogWriter(out, workload, self._capacity, **self._header)
        for line in self._lines:
            DecisionLogWriter._write(writer, dict(line))
        writer._rejected = list(self._rejected)  # the trailing rejections, for the summary
        writer.close(state, is_done=is_done)
        return out.getvalue()
