"""Decision-log format 6's column tables: a plan's work and a result's
completions in bytes that follow the values that differ, not the rows.

Format 5 wrote each field as an array (one value per row). In a run that
decodes a batch of a hundred requests, most of those arrays repeat what
another array of the same line already says: every completion's id,
generation and interval are its work item's; a decode row's ``end`` is its
``start`` plus one; the ``kind`` and ``generation`` columns hold one value;
the tie-break key repeats the id and generation. A format-6 table is an
object ``{"rows": N, FIELD: COLUMN, ...}`` whose COLUMN is one of:

- an array: the N values (format 5's form);
- ``{"runs": [v1, n1, v2, n2, ...]}``: ``v1`` n1 times, then ``v2`` n2 times...;
- ``{"steps": [first, d1, d2, ...]}``: integers, each the previous plus ``d``;
- ``{"numbered": [PREFIX, WIDTH, COLUMN]}``: strings, each PREFIX then
  COLUMN's integer in WIDTH decimal digits, zero-padded (request ids such
  as ``r000900``: the numbers then go as ``steps``);
- ``{"same": NAME}``: the values of the column NAME, one decoded before it
  (an earlier field of the table, in the table's field order, or for a
  result's completions ``work.FIELD`` of the same line's plan);
- ``{"plus": [NAME, COLUMN]}``: integers, NAME's values plus COLUMN's, row
  by row (``end`` as ``start`` plus the lengths);
- ``{"keys": [COLUMN, ...]}`` (``tie_break`` only): row ``i`` is the array of
  each COLUMN's value ``i`` (every key of one arity; a COLUMN here may be
  ``same`` as a field of the table).

Only columns of strings, integers, booleans and nulls are ever written in
a compact form (a float or a container stays an array: ``1 == 1.0 == True``
in Python, never in the canonical text), so decoding gives the exact values
and the canonical text of every row (:func:`decode_table`) is format 5's.
The writer names, per field, the forms worth trying (``records/codec.py``:
a completion's ``start`` may be ``same`` as its work's, a ``kind`` runs) and
takes the first that applies and is (roughly) shorter than the array, each
test at C speed (it runs for every column of every line); the choice is a
function of the values, so equal runs write equal bytes. The reader takes
any form anywhere.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate, compress
from typing import Any

ROWS_KEY = "rows"
KEYS_FIELD = "tie_break"
_SIMPLE_TYPES = frozenset({str, int, bool, type(None)})
_FORMS = ("runs", "steps", "numbered", "same", "plus", "keys")
_MAX_WIDTH = 18  # digits of a number in a numbered string: at most an int64


#: a field's compact forms to try, in order: ``runs``, ``steps``, ``numbered``,
#: ``same:NAME`` or ``plus:NAME`` (the ``tie_break`` field's: each key column's)
Hints = Mapping[str, tuple[str, ...]]


def encode_table(columns: Mapping[str, Sequence[Any]], names: tuple[str, ...],
                 num_rows: int, hints: Hints, *,
                 known: Mapping[str, Sequence[Any]] | None = None) -> dict[str, Any]:
    """``columns`` (one sequence per field of ``names``, ``num_rows`` long)
    as a format-6 table, each field in the first of its ``hints`` forms
    that applies (a field without: an array). ``known``: columns a
    ``same`` may name besides the table's own (a result's completions:
    ``work.FIELD``)."""
    table: dict[str, Any] = {ROWS_KEY: num_rows}
    # each column once as a tuple (``tuple()`` of a record's field column copies
    # nothing) with the set of its value types, which every form reads
    seen: dict[str, _Column] = {name: _column(values) for name, values in (known or {}).items()}
    for name in names:
        column = _column(columns[name])
        forms = _compiled(hints.get(name, ()))
        if name == KEYS_FIELD:
            table[name] = _encode_keys(column[0], forms, seen)
            continue
        table[name] = _encode(column, forms, seen)
        seen[name] = column
    return table


_Column = tuple[tuple[Any, ...], frozenset[type]]
_Form = Callable[[_Column, str, Mapping[str, _Column]], Any]


def _column(values: Sequence[Any]) -> _Column:
    values = tuple(values)
    return values, frozenset(map(type, values))


@functools.lru_cache(maxsize=64)
def _compiled(forms: tuple[str, ...]) -> tuple[tuple[_Form, str], ...]:
    return tuple((_FORM_ENCODERS[form.partition(":")[0]], form.partition(":")[2])
                 for form in forms)


def _encode(column: _Column, forms: tuple[tuple[_Form, str], ...],
            seen: Mapping[str, _Column]) -> Any:
    """The first of ``forms`` that applies to ``column`` and is (roughly)
    shorter than the array, else the array (every test at C speed: this
    runs for every column of every line)."""
    values, types = column
    if not values or not types <= _SIMPLE_TYPES:
        return values
    for encode, argument in forms:
        encoded = encode(column, argument, seen)
        if encoded is not None:
            return encoded
    return values


def _same(column: _Column, name: str, seen: Mapping[str, _Column]) -> dict[str, Any] | None:
    values, types = column
    other, other_types = seen.get(name, ((), frozenset()))
    if other != values or other_types != types:
        return None
    if len(types) == 1:  # equal values of one type: the same text
        return {"same": name}
    return {"same": name} if list(map(type, other)) == list(map(type, values)) else None


def _plus(column: _Column, name: str, seen: Mapping[str, _Column]) -> dict[str, Any] | None:
    values, types = column
    base, base_types = seen.get(name, ((), frozenset()))
    if types != _INT or base_types != _INT or len(base) != len(values):
        return None
    offsets = list(map(operator.sub, values, base))
    runs = _runs(offsets, False)
    return {"plus": [name, offsets if runs is None else {"runs": runs}]}


def _runs_form(column: _Column, _: str, seen: Mapping[str, _Column]) -> dict[str, Any] | None:
    runs = _runs(column[0], len(column[1]) > 1)
    return None if runs is None else {"runs": runs}


def _steps(column: _Column, _: str = "", seen: Mapping[str, _Column] | None = None
           ) -> dict[str, Any] | None:
    values, types = column
    if types != _INT or len(values) < 2:
        return None
    steps = [values[0], *map(operator.sub, values[1:], values[:-1])]
    # fewer digits, roughly: a function of the values, so equal runs write equal bytes
    return {"steps": steps} if 3 * sum(map(abs, steps)) < sum(map(abs, values)) else None


def _numbered_form(column: _Column, _: str,
                   seen: Mapping[str, _Column]) -> dict[str, Any] | None:
    return _numbered(column[0]) if column[1] == _STR else None


_INT, _STR = frozenset({int}), frozenset({str})


def _runs(values: Sequence[Any], is_mixed: bool) -> list[Any] | None:
    """``[v1, n1, v2, n2, ...]`` where that is shorter than ``values``. A
    run ends where the value or its type changes (``1`` then ``True``)."""
    changed: Any = map(operator.ne, values[1:], values[:-1])
    if is_mixed:
        types = list(map(type, values))
        changed = map(operator.or_, changed, map(operator.is_not, types[1:], types[:-1]))
    starts = [0, *compress(range(1, len(values)), changed)]
    if 2 * len(starts) >= len(values):
        return None
    runs: list[Any] = [None, 0] * len(starts)
    runs[::2] = map(values.__getitem__, starts)
    runs[1::2] = map(operator.sub, [*starts[1:], len(values)], starts)
    return runs


def _numbered(values: Sequence[str]) -> dict[str, Any] | None:
    """``values`` as a prefix and zero-padded numbers, where every one is
    the same prefix then decimal digits of one width."""
    if len(set(map(len, values))) != 1:
        return None
    prefix = _common_prefix(min(values), max(values))
    width = len(values[0]) - len(prefix)
    if not 1 <= width <= _MAX_WIDTH:
        return None
    tails = list(map(operator.itemgetter(slice(len(prefix), None)), values))
    digits = "".join(tails)
    if not (digits.isascii() and digits.isdigit()):
        return None
    numbers = tuple(map(int, tails))
    return {"numbered": [prefix, width, _steps((numbers, _INT)) or numbers]}


def _common_prefix(first: str, last: str) -> str:
    """The longest common prefix of the least and the greatest string: every
    string's between them shares it."""
    for i, (a, b) in enumerate(zip(first, last, strict=False)):
        if a != b:
            return first[:i]
    return first[:min(len(first), len(last))]


def _encode_keys(keys: Sequence[Any], forms: tuple[tuple[_Form, str], ...],
                 seen: Mapping[str, _Column]) -> Any:
    """The tie-break keys: one column per key field (each in the first of
    ``forms`` that applies) where every key is an array of one arity, else
    the keys as they are."""
    if not keys or not set(map(type, keys)) <= {list, tuple} or len(set(map(len, keys))) != 1:
        return keys
    return {"keys": [_encode(_column(column), forms, seen)
                     for column in zip(*keys, strict=True)]}


_FORM_ENCODERS = {"same": _same, "plus": _plus, "runs": _runs_form, "steps": _steps,
                  "numbered": _numbered_form}


# --- decoding ------------------------------------------------------------------------------
def decode_table(table: Any, names: tuple[str, ...], *,
                 known: Mapping[str, list[Any]] | None = None) -> dict[str, list[Any]]:
    """A format-6 table's columns as arrays (format 5's form), each
    ``rows`` long. ``ValueError`` naming the field and the problem for a
    table that is not one (a missing or unknown field, an unknown form, a
    ``same`` or ``plus`` naming a column not decoded before it, a length
    other than ``rows``)."""
    if not isinstance(table, Mapping):
        raise ValueError("must be an object of columns")
    num_rows = table.get(ROWS_KEY)
    if type(num_rows) is not int or num_rows < 0:
        raise ValueError(f"{ROWS_KEY} must be an integer >= 0")
    missing = [name for name in names if name not in table]
    unknown = sorted(set(table) - set(names) - {ROWS_KEY})
    if missing or unknown:
        raise ValueError(f"{(missing or unknown)[0]} {'missing' if missing else 'is not a field'}")
    seen: dict[str, list[Any]] = dict(known or {})
    decoded: dict[str, list[Any]] = {}
    for name in names:
        try:
            if name == KEYS_FIELD:
                values = _decode_keys(table[name], num_rows, seen)
            else:
                values = _decode(table[name], seen)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
        if len(values) != num_rows:
            raise ValueError(f"{name}: {len(values)} values, {ROWS_KEY} is {num_rows}")
        decoded[name] = seen[name] = values
    return decoded


def _decode(column: Any, seen: Mapping[str, list[Any]]) -> list[Any]:
    if isinstance(column, list):
        return column
    form = _form(column)
    argument = column[form]
    if form == "same":
        if not isinstance(argument, str) or argument not in seen:
            raise ValueError(f"same names no column decoded before it ({_brief(argument)})")
        return list(seen[argument])
    if form == "runs":
        return _decode_runs(argument)
    if form == "steps":
        if not argument or not all(type(step) is int for step in argument):
            raise ValueError("steps must be a non-empty array of integers")
        return list(accumulate(argument))
    if form == "plus":
        return _decode_plus(argument, seen)
    if form == "numbered":
        return _decode_numbered(argument)
    raise ValueError("keys is the tie_break field's form only")


def _form(column: Any) -> str:
    if not isinstance(column, Mapping) or len(column) != 1 or next(iter(column)) not in _FORMS:
        raise ValueError(f"must be an array or an object with one of {list(_FORMS)}")
    return str(next(iter(column)))


def _decode_runs(runs: Any) -> list[Any]:
    if not isinstance(runs, list) or len(runs) % 2:
        raise ValueError("runs must be an array of value, count pairs")
    values: list[Any] = []
    for value, count in zip(runs[::2], runs[1::2], strict=True):
        if type(count) is not int or count < 1:
            raise ValueError(f"runs: a count must be an integer >= 1, got {_brief(count)}")
        values += [value] * count
    return values


def _decode_numbered(argument: Any) -> list[str]:
    if (not isinstance(argument, list) or len(argument) != 3
            or not isinstance(argument[0], str) or type(argument[1]) is not int
            or not 1 <= argument[1] <= _MAX_WIDTH):
        raise ValueError(f"numbered must be [PREFIX, WIDTH 1..{_MAX_WIDTH}, COLUMN]")
    prefix, width, column = argument
    numbers = _decode(column, {})
    limit = 10 ** width
    if not all(type(number) is int and 0 <= number < limit for number in numbers):
        raise ValueError(f"numbered: every number must be an integer of at most {width} digits")
    return [f"{prefix}{number:0{width}d}" for number in numbers]


def _decode_plus(argument: Any, seen: Mapping[str, list[Any]]) -> list[Any]:
    if not isinstance(argument, list) or len(argument) != 2:
        raise ValueError("plus must be [NAME, COLUMN]")
    base, column = argument
    if not isinstance(base, str) or base not in seen:
        raise ValueError(f"plus names no column decoded before it ({_brief(base)})")
    offsets, base_values = _decode(column, {}), seen[base]
    if len(offsets) != len(base_values) or not all(
            type(value) is int for value in (*offsets, *base_values)):
        raise ValueError(f"plus: {base} and the offsets must be integers of one length")
    return list(map(operator.add, base_values, offsets))


def _decode_keys(column: Any, num_rows: int, seen: Mapping[str, list[Any]]) -> list[Any]:
    if isinstance(column, list):
        return column
    if _form(column) != "keys" or not isinstance(column["keys"], list):
        raise ValueError("must be an array or {\"keys\": [COLUMN, ...]}")
    key_columns = [_decode(key_column, seen) for key_column in column["keys"]]
    if any(len(values) != num_rows for values in key_columns):
        raise ValueError(f"keys: every key column must hold {ROWS_KEY} values")
    if not key_columns:
        return [[] for _ in range(num_rows)]
    return [list(key) for key in zip(*key_columns, strict=True)]


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
