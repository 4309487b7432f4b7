"""Registry entries: a result record with its two registry flags (0x0E).

The source-reported result registry keeps, beside each record R, whether
its comparison coordinates are complete and whether the value was
reproduced here. Both flags are checked, not trusted:

- ``coordinates_complete`` must equal what the record shows: no
  coordinate of the comparison set is written as unstated;
- ``reproduced_locally`` may be true only with ``reproduction``, the label
  of the local run that reproduced it, and never for a record whose
  evidence class is "source-reported" (a reproduction is its own
  "measured here" record; calling a paper's number local is an overclaim).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from iterserve.lab.coordinates import COMPARISON_SET, CoordinateError, ResultRecord
from iterserve.records.failures import failure_of

OVERCLAIM = failure_of("local_measurement_overclaim")

UNSTATED = "unstated"  # how a registry writes a coordinate its source does not fix
FLAG_FIELDS = ("coordinates_complete", "reproduced_locally", "reproduction")


@dataclass(frozen=True, slots=True)
class RegistryFlags:
    coordinates_complete: bool
    reproduced_locally: bool
    reproduction: str | None  # the local run that reproduced the value


def unstated_coordinates(record: ResultRecord) -> tuple[str, ...]:
    """Coordinates of the comparison set that the source leaves unstated."""
    return tuple(name for name in COMPARISON_SET
                 if isinstance(value := getattr(record, name), str)
                 and value.lower().startswith(UNSTATED))


def entry_from_json(obj: Any, where: str) -> tuple[ResultRecord, RegistryFlags]:
    """One registry entry; raises CoordinateError naming the broken flag."""
    if not isinstance(obj, dict):
        raise CoordinateError(f"{where}: a result must be an object")
    record = ResultRecord.from_json({k: v for k, v in obj.items() if k not in FLAG_FIELDS}, where)
    complete, reproduced = obj.get("coordinates_complete"), obj.get("reproduced_locally")
    reproduction = obj.get("reproduction")
    if not isinstance(complete, bool) or not isinstance(reproduced, bool):
        raise CoordinateError(f"{where}: coordinates_complete and reproduced_locally must be "
                              "true or false")
    unstated = unstated_coordinates(record)
    if complete != (not unstated):
        shown = f"unstated {', '.join(unstated)}" if unstated else "every coordinate stated"
        raise CoordinateError(f"{where}: coordinates_complete is {str(complete).lower()} but "
                              f"the record has {shown}")
    if reproduced and record.evidence_class == "source-reported":
        raise CoordinateError(f"{where}: {OVERCLAIM.label}: a source-reported value is not "
                              "reproduced here; a reproduction is its own 'measured here' record")
    if reproduced != isinstance(reproduction, str) or reproduction == "":
        raise CoordinateError(f"{where}: reproduced_locally needs reproduction (the local "
                              "run's label), and reproduction needs reproduced_locally")
    return record, RegistryFlags(complete, reproduced, reproduction)
