"""NOTE(lax-int): pydantic's lax int of a string, as vLLM's FastAPI reads an int query
parameter (the routes' tests run it through a server: test_responses_background.py)."""

from __future__ import annotations

import pytest

from kvpool.server.query_int import MAX_LAX_INT_DIGITS, lax_int

N = MAX_LAX_INT_DIGITS


@pytest.mark.parametrize("text, value", [
    ("7", 7), ("+7", 7), ("-7", -7), ("\xa0 7\u3000\t", 7), ("1_0_0", 100), ("007", 7),
    ("5.000", 5), ("-0.0", 0), ("0_0", 0), ("9" * N, int("9" * N)), ("0" * (N + 5), 0),
    ("-" + "9" * (N - 1), -int("9" * (N - 1))), ("1_" * 2000 + "1", int("1" * 2001)),
])
def test_what_pydantic_takes(text, value):
    assert lax_int(text) == value


@pytest.mark.parametrize("text", [
    "", " ", "+", "5.", ".0", "5.5", "1e3", "0x10", "1__0", "_1", "1_", "-_1", "--1", "\x1c5",
    "5\u200b", "\u0665", "1 0", "5.0_0",
])
def test_what_pydantic_refuses(text):
    with pytest.raises(ValueError, match="unable to parse string as an integer"):
        lax_int(text)


@pytest.mark.parametrize("text", ["1" * (N + 1), "-" + "1" * N, "1" * (N + 1) + ".0"])
def test_too_many_digits_is_pydantics_size_error(text):
    with pytest.raises(ValueError, match="exceeded maximum size"):
        lax_int(text)
