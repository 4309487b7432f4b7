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
The encoder picks the first form that applies in the order above and is
shorter than the array; the choice is a function of the values, so equal
runs write equal bytes.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Mapping, Sequence
from itertools import accumulate, groupby
from typing import Any

ROWS_KEY = "rows"
KEYS_FIELD = "tie_break"
_SIMPLE_TYPES = frozenset({str, int, bool, type(None)})
_FORMS = ("runs", "steps", "numbered", "same", "plus", "keys")
_MAX_WIDTH = 18  # digits of a number in a numbered string: at most an int64


def encode_table(columns: Mapping[str, Sequence[Any]], names: tuple[str, ...],
                 num_rows: int, *, known: Mapping[str, Sequence[Any]] | None = None,
                 bases: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``columns`` (one sequence per field of ``names``, ``num_rows`` long)
    as a format-6 table. ``known``: columns a ``same`` may name besides the
    table's own (a result's completions: ``work.FIELD``); ``bases``: a
    field's ``plus`` base (``{"end": "start"}``)."""
    table: dict[str, Any] = {ROWS_KEY: num_rows}
    seen: dict[str, list[Any]] = {name: list(values) for name, values in (known or {}).items()}
    for name in names:
        values = list(columns[name])
        if name == KEYS_FIELD:
            table[name] = _encode_keys(values, num_rows, seen)
            continue
        base = (bases or {}).get(name)
        table[name] = _encode(values, seen, None if base is None else seen.get(base), base)
        seen[name] = values
    return table


def _encode(values: list[Any], seen: Mapping[str, list[Any]],
            base_values: list[Any] | None = None, base: str | None = None) -> Any:
    types = set(map(type, values))
    if not values or not types <= _SIMPLE_TYPES:
        return values
    for name, other in seen.items():
        if other == values and list(map(type, other)) == list(map(type, values)):
            return {"same": name}
    if (base is not None and base_values is not None and types == {int}
            and len(base_values) == len(values) and set(map(type, base_values)) == {int}):
        return {"plus": [base, _encode(list(map(operator.sub, values, base_values)), {})]}
    # a run boundary count first (at C speed): most columns are not runs
    if sum(map(operator.ne, values[1:], values[:-1])) * 2 + 2 < len(values):
        runs: list[Any] = []
        for (_, value), group in groupby(zip(map(type, values), values, strict=True)):
            runs += (value, sum(1 for _ in group))
        if len(runs) < len(values):
            return {"runs": runs}
    if types == {str}:
        numbered = _numbered(values)
        if numbered is not None:
            return numbered
    if types == {int} and len(values) > 1:
        steps = [values[0], *map(operator.sub, values[1:], values[:-1])]
        if len(repr(steps)) < len(repr(values)):
            return {"steps": steps}
    return values


def _numbered(values: list[str]) -> dict[str, Any] | None:
    """``values`` as a prefix and zero-padded numbers, where every one is
    the same prefix then decimal digits of one width."""
    if len(set(map(len, values))) != 1:
        return None
    prefix = os.path.commonprefix(values)
    width = len(values[0]) - len(prefix)
    if not 1 <= width <= _MAX_WIDTH:
        return None
    tails = [value[len(prefix):] for value in values]
    digits = "".join(tails)
    if not (digits.isascii() and digits.isdigit()):
        return None
    return {"numbered": [prefix, width, _encode(list(map(int, tails)), {})]}


def _encode_keys(keys: list[Any], num_rows: int, seen: Mapping[str, list[Any]]) -> Any:
    """The tie-break keys: one column per key field where every key is an
    array of one arity, else the keys as they are."""
    if not keys or not all(isinstance(key, list | tuple) for key in keys):
        return keys
    arity = len(keys[0])
    if any(len(key) != arity for key in keys):
        return keys
    key_columns = [list(column) for column in zip(*keys, strict=True)] if arity else []
    return {"keys": [_encode(column, seen) for column in key_columns]}


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
