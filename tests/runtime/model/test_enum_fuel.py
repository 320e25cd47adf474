"""Enum-heavy JSON schemas (kvpool/runtime/model/grammar_fuel.py NOTE(enum-fuel)): an enum of
20,000 strings, which vLLM 0.33 serves on xgrammar, was llguidance's 400 under LIMITS' initial
lexer fuel; it is granted fuel for its enum values and served, while a pattern past the budget
beside it is still refused by its own probe, and a schema with MAX_PROBES patterns gets no
grant. Through the real parser and compiler, read with the built-in byte tokenizer."""

from __future__ import annotations

import pytest

from kvpool.errors import RequestError
from kvpool.runtime.model.grammar import LIMITS, MAX_PROBES
from kvpool.server.sampling_fields import parse_response_format
from tests.server.test_tool_schema_parity import MATCHERS, accepts, as_format, forced

ZONES = [f"Zone_{i}/City_{i}" for i in range(20_000)]


def zones(**more) -> dict:
    return {"type": "object", "properties": {"tz": {"type": "string", "enum": ZONES}, **more},
            "required": ["tz"]}


def test_an_enum_of_20000_strings_is_served_each_value_and_no_other():
    spec = parse_response_format(as_format(zones()))
    assert spec.lexer_fuel > LIMITS["initial_lexer_fuel"] and "enum" not in str(spec.rest)
    for value in (ZONES[0], ZONES[-1]):
        assert accepts(spec, {"tz": value})
    assert not accepts(spec, {"tz": "Zone_20000/City_20000"})
    assert not accepts(spec, {"tz": "Zone_1/City_2"})
    named = forced(zones())
    assert accepts(named, {"tz": ZONES[7]}) and not accepts(named, {"tz": "x"})


def test_the_grant_pays_for_the_enum_only():
    """A pattern over the budget beside the enum is refused by its own probe."""
    spec = parse_response_format(as_format(zones(p={"type": "string",
                                                     "pattern": "^x{100000}$"})))
    with pytest.raises(RequestError, match=r"the pattern '\^\(\?:\^x\{100000\}\$\)\$' is too "
                                           r"large") as err:
        MATCHERS.compiler.compile(spec)
    assert err.value.param == "response_format"
    many = {f"p{i}": {"type": "string", "pattern": f"^a{i}$"} for i in range(MAX_PROBES)}
    with pytest.raises(RequestError, match="initial lexer configuration"):
        parse_response_format(as_format(zones(**many)))
