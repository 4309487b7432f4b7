"""The victim record: why one request was chosen to stop (0x0C).

Victim selection is a fairness and SLO policy, so a preemption keeps the
score inputs and the tie-break that chose its victim, not only the id.
:class:`VictimScore` holds them as fields; its :meth:`~VictimScore.reason`
is the intent's reason text the decision log writes, and
:func:`victim_score_of` reads a logged reason back into the same fields
(the log's bytes stay what they were before the record had fields).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from iterserve.records.preemption import PreemptionCause


@dataclass(frozen=True, slots=True)
class VictimScore:
    """One victim choice: the chooser, the victim's place in the candidate
    queue (the FCFS tie-break: the tail goes first) and the inputs the
    choosers score (priority and arrival: the PRIORITY chooser's key; the
    rows it holds: what preempting it releases or rebuilds)."""

    chooser: str
    queue_position: int
    queue_length: int
    priority: int
    arrival: float
    held_rows: int
    cause: PreemptionCause = PreemptionCause.KV_EXHAUSTED
    # C_recompute and C_preserve (ms) when the run chose the mode by cost (0x0C)
    recompute_ms: float | None = None
    preserve_ms: float | None = None
    # cause EXTENSION_WAIT_BOUND: the consecutive decisions the request short of
    # blocks waited on a release in flight, the run's bound (0x06)
    release_waits: int | None = None

    def __post_init__(self) -> None:
        if not self.chooser or not 0 <= self.queue_position < self.queue_length:
            raise ValueError(f"victim at {self.queue_position} of {self.queue_length} by "
                             f"{self.chooser!r}: needs a chooser and a position in the queue")
        if self.held_rows < 0:
            raise ValueError("held_rows must be >= 0")
        is_bound = self.cause is PreemptionCause.EXTENSION_WAIT_BOUND
        if is_bound != (self.release_waits is not None):
            raise ValueError("release_waits is recorded exactly when the cause is the "
                             "extension wait bound")
        if self.release_waits is not None and self.release_waits < 1:
            raise ValueError("release_waits must be >= 1")

    @property
    def tie_break(self) -> tuple[object, ...]:
        """The chooser's ordering inputs: (priority, arrival, queue position)."""
        return self.priority, self.arrival, self.queue_position

    def reason(self) -> str:
        """The intent's reason text (the decision log's spelling)."""
        return (f"{self.cause.value}; victim by {self.chooser}: "
                f"queue_position={self.queue_position}/{self.queue_length}, "
                f"priority={self.priority}, arrival={self.arrival}, "
                f"held_rows={self.held_rows}" + self._waits() + self._costs())

    def _waits(self) -> str:
        return "" if self.release_waits is None else f"; release_waits={self.release_waits}"

    def _costs(self) -> str:
        if self.recompute_ms is None or self.preserve_ms is None:
            return ""
        return f"; c_recompute_ms={self.recompute_ms!r}, c_preserve_ms={self.preserve_ms!r}"


_REASON = re.compile(
    r"^(?P<cause>[a-z_]+); victim by (?P<chooser>[^:]+): "
    r"queue_position=(?P<position>\d+)/(?P<length>\d+), priority=(?P<priority>-?\d+), "
    r"arrival=(?P<arrival>[^,]+), held_rows=(?P<held>\d+)"
    r"(?:; release_waits=(?P<waits>\d+))?"
    r"(?:; c_recompute_ms=(?P<recompute>[^,]+), c_preserve_ms=(?P<preserve>[^,]+))?$")


def victim_score_of(reason: str) -> VictimScore | None:
    """The fields of a victim reason :meth:`VictimScore.reason` wrote; None
    for any other reason text."""
    match = _REASON.match(reason)
    if match is None:
        return None
    try:
        cause = PreemptionCause(match["cause"])
        score = VictimScore(match["chooser"], int(match["position"]), int(match["length"]),
                            int(match["priority"]), _number(match["arrival"]), int(match["held"]),
                            cause, _cost(match["recompute"]), _cost(match["preserve"]),
                            None if match["waits"] is None else int(match["waits"]))
    except ValueError:
        return None
    return score if score.reason() == reason else None


def _number(text: str) -> float:
    """An arrival as the view held it: an int stays an int (its text has no point)."""
    return int(text) if re.fullmatch(r"-?\d+", text) else float(text)


def _cost(text: str | None) -> float | None:
    return None if text is None else float(text)
