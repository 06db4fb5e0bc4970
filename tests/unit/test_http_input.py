"""Issue 25: the admin HTTP body and query checks (pure; the live-daemon side is in
tests/integration/test_http_security.py and test_fuzz_http.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autorecovery.admin.http_input import MAX_JSON_DEPTH, one_line, parse_json
from autorecovery.admin.op_context import BadRequestError


@pytest.mark.parametrize("raw, words", [
    (b"", "no request body"),
    (b"\xff", "not UTF-8"),
    (b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), "nests deeper"),
    (b'{"a": 1, "a": 2}', "'a' appears twice"),
    (b'{"x": {"a": 1, "a": 2}}', "'a' appears twice"),
    (b'{"delay_seconds": NaN}', "field 'delay_seconds': NaN"),
    (b'{"t": [1, -Infinity]}', "field 't': -Infinity"),
    (b"Infinity", "request body: Infinity"),
    (b'{"n": 1' + b"0" * 5000 + b"}", "not JSON"),
    (b"{", "not JSON"),
])
def test_bad_bodies_name_what_is_wrong(raw, words):
    with pytest.raises(BadRequestError) as err:
        parse_json(raw)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_brackets_inside_strings_do_not_count_as_nesting():
    assert parse_json(b'{"reason": "' + b"[" * 100 + b'\\"{' * 50 + b'"}') == {"reason": "[" * 100 + '"{' * 50}
    assert parse_json(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH) is not None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_parse_or_raise_bad_request(raw):
    try:
        parse_json(raw)
    except BadRequestError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 400


def test_one_line():
    assert one_line("a\nb\r\n  c") == "a b c"
    assert one_line("x" * 1000, 10) == "x" * 10 + "..."
