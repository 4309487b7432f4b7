"""report.json written a section at a time, some sections encoded in another
process (issue 15: a long run's report phase): the bytes of
``json.dump(report, indent=2, sort_keys=True)``."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iterserve.records.pretty_json import encode_section, write_sorted_json

SCALARS = (st.none() | st.booleans() | st.integers() | st.floats() | st.text())
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=25,
)
REPORTS = st.dictionaries(st.text(max_size=6), VALUES, max_size=6)


def _written(report: dict[str, object], encoded: dict[str, bytes]) -> str:
    stream = io.BytesIO()
    write_sorted_json(stream, report, encoded)
    return stream.getvalue().decode("ascii")


@settings(max_examples=300, deadline=None)
@given(REPORTS, st.data())
def test_spliced_sections_write_the_whole_dump(report, data) -> None:
    """Whichever keys come pre-encoded (none, some, all), the text is the
    stdlib's dump of the whole report: nested lines, newlines and quotes in
    strings, empty containers, NaN."""
    keys = data.draw(st.lists(st.sampled_from(sorted(report)), unique=True)) if report else []
    rest = {key: value for key, value in report.items() if key not in keys}
    encoded = {key: encode_section(report[key]) for key in keys}
    assert _written(rest, encoded) == json.dumps(report, indent=2, sort_keys=True)


def test_an_empty_report_and_a_section_given_twice() -> None:
    assert _written({}, {}) == json.dumps({}, indent=2, sort_keys=True)
    with pytest.raises(ValueError, match="given twice: requests"):
        _written({"requests": {}}, {"requests": b"{}"})
