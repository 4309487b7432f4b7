"""A per-iteration series of frozen records, held as one typed array per field.

A run records a composition and a resource sample per executed iteration
(about two iterations a request): as frozen slotted objects with boxed
numbers that is ~150 bytes a record, kept to the end of the run for the
report and the plots. :class:`RecordColumns` keeps each field in
an ``array`` (8 bytes a value) and makes the record again when it is read:
the same records, in order, with the same values and types (an ``int``
column holds ints only, a ``float`` column floats only: anything else is
refused when appended, so a read never changes a value's type).
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar, overload

R = TypeVar("R")

_PYTHON_TYPES = {"q": int, "d": float}


class RecordColumns(Sequence[R], Generic[R]):
    """Records of the dataclass ``record_type``, one array per field;
    ``typecodes`` names each field's array type in field order: ``q`` for
    int fields, ``d`` for float fields."""

    __slots__ = ("_make", "_names", "_columns", "_types")

    def __init__(self, record_type: Callable[..., R], typecodes: str) -> None:
        names = tuple(field.name for field in dataclasses.fields(record_type))  # type: ignore[arg-type]
        if len(names) != len(typecodes) or set(typecodes) - set(_PYTHON_TYPES):
            raise ValueError(f"need one of {sorted(_PYTHON_TYPES)} per field of {names}")
        self._make = record_type
        self._names = names
        self._columns = tuple(array(code) for code in typecodes)
        self._types = tuple(_PYTHON_TYPES[code] for code in typecodes)

    def append(self, record: R) -> None:
        """Append ``record``'s values, all or none (one a run's iteration:
        the types are compared as one tuple, the fields named on refusal)."""
        values = [getattr(record, name) for name in self._names]
        if tuple(map(type, values)) != self._types:
            for name, value, column in zip(self._names, values, self._columns, strict=True):
                if type(value) is not _PYTHON_TYPES[column.typecode]:
                    raise TypeError(f"{name}={value!r} does not fit a {column.typecode!r} column")
        for value, column in zip(values, self._columns, strict=True):
            column.append(value)

    def extend_columns(self, columns: Sequence[Sequence[Any]]) -> None:
        """Append records given as whole columns, in field order, all or
        none: the columns of one length, each holding only its field's
        type (checked at C speed: a long run's records at once)."""
        if len(columns) != len(self._names):
            raise ValueError(f"need a column per field of {self._names}, got {len(columns)}")
        if len(set(map(len, columns))) > 1:
            raise ValueError(f"columns of different lengths: {list(map(len, columns))}")
        for name, values, kind in zip(self._names, columns, self._types, strict=True):
            wrong = set(map(type, values)) - {kind}
            if wrong:
                names = sorted(type_.__name__ for type_ in wrong)
                raise TypeError(f"{name}: {names} values do not fit a {kind.__name__} column")
        for column, values in zip(self._columns, columns, strict=True):
            column.extend(values)

    def __len__(self) -> int:
        return len(self._columns[0])

    def column(self, name: str) -> array:
        """Field ``name`` of every record, in order: the array itself (read
        it, do not change it)."""
        try:
            return self._columns[self._names.index(name)]
        except ValueError:
            raise KeyError(f"no field {name!r}; fields: {self._names}") from None

    @overload
    def __getitem__(self, index: int) -> R: ...

    @overload
    def __getitem__(self, index: slice) -> list[R]: ...

    def __getitem__(self, index: int | slice) -> R | list[R]:
        if isinstance(index, slice):
            return [self._make(*values)
                    for values in zip(*(column[index] for column in self._columns),
                                      strict=True)]
        return self._make(*(column[index] for column in self._columns))

    def __iter__(self) -> Iterator[R]:
        make = self._make
        return (make(*values) for values in zip(*self._columns, strict=True))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RecordColumns):
            return self._names == other._names and self._columns == other._columns
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecordColumns({getattr(self._make, '__name__', self._make)!r}, {len(self)} records)"


def field_values(records: Sequence[Any], name: str) -> Sequence[Any]:
    """Field ``name`` of every record, in order: a :class:`RecordColumns`'
    column itself (no record is made: a long run's report reads several
    fields of its 200,000 iterations), else the field read from each record."""
    if isinstance(records, RecordColumns):
        return records.column(name)
    return [getattr(record, name) for record in records]
