"""Records that transpose into field columns once.

A plan's work items and a result's completed intervals are NamedTuples, and
nearly every layer reads them a field column at a time: the validator, the
simulated executor and its cost model, the transition, the follower's feed
and the decision log. Each ``zip(*items)`` of a plan's work walks every
row, and a decision would otherwise make four of them on the same tuple
(and three of its result's completions).

A :class:`FieldColumns` is a tuple of such records (equal to, and hashing
as, the plain tuple) that keeps its transposition once one is asked for;
:func:`field_columns` is how a reader asks, and falls back to transposing a
plain tuple. The records are immutable, so the columns cannot go stale.
A maker that already holds the columns (the result builder, the follower
decoding its feed) hands them over with :meth:`FieldColumns.with_columns`.
Handed-over columns are trusted, not checked against the items (the
validator reads the columns, the KV residency the items), so only a maker
that built the items from those very columns may hand them over; a policy
never does (the plan builder's ``Work`` transposes its own items).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

_Record = TypeVar("_Record", bound=tuple[Any, ...])
_Self = TypeVar("_Self", bound="FieldColumns[Any]")

Columns = tuple[tuple[Any, ...], ...]


class FieldColumns(tuple[_Record, ...]):
    """A tuple of records with their field columns kept once transposed.

    The columns live in the instance's ``__dict__`` (a tuple subclass can
    have no other slot); pickling and copying drop them.
    """

    @classmethod
    def with_columns(cls: type[_Self], records: Iterable[Any], columns: Columns) -> _Self:
        """``records`` whose transposition the caller holds already:
        ``columns`` must be ``tuple(zip(*records))`` (the maker's duty)."""
        made = cls(records)
        made.__dict__["_columns"] = columns
        return made

    @property
    def columns(self) -> Columns:
        """``tuple(zip(*self, strict=True))``, transposed on the first ask."""
        cached: Columns | None = self.__dict__.get("_columns")
        if cached is None:
            cached = self.__dict__["_columns"] = tuple(zip(*self, strict=True))
        return cached

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (tuple(self),)


def field_columns(records: Sequence[Any]) -> Columns:
    """The field columns of ``records`` (``()`` when there are none): kept
    ones from a :class:`FieldColumns`, else transposed now. ``ValueError``
    when the records are not all of one length."""
    if isinstance(records, FieldColumns):
        return records.columns
    return tuple(zip(*records, strict=True))
