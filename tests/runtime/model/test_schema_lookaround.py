"""JSON schemas vLLM's default backend (xgrammar) serves and llguidance refused, compiled with
the real compiler and read token by token with the built-in byte tokenizer
(kvpool/runtime/model/grammar_relax.py): a ``pattern``'s look-ahead is dropped and the rest
enforced (NOTE(look-around); pydantic's Decimal, as the openai SDK sends it); what still cannot
compile (a look-behind too), and a client's own regex with a look-ahead, stays a 400. Numeric
bounds (NOTE(int64-bounds)): test_schema_wide_bounds.py."""

from __future__ import annotations

import decimal
import json

import openai
import pydantic
import pytest

from kvpool.errors import RequestError
from kvpool.runtime.model import build_byte_tokenizer
from kvpool.runtime.model.grammar import GrammarSpec
from kvpool.runtime.model.grammar_matchers import GrammarMatchers
from kvpool.runtime.model.grammar_relax import MAX_RELAXED
from kvpool.server.tools.request import parse_tool_request

TOK = build_byte_tokenizer()
MATCHERS = GrammarMatchers(TOK, 520)


def accepts(spec: GrammarSpec, value) -> bool:
    """Whether the compiled grammar generates ``value`` (compact JSON) whole."""
    m = GrammarMatchers.new_matcher(MATCHERS.compiler.compile(spec))
    ids = TOK.encode(json.dumps(value, separators=(",", ":")), add_special_tokens=False)
    if m.validate_tokens(ids) != len(ids):
        return False
    m.consume_tokens(ids)
    return m.is_accepting()


class Price(pydantic.BaseModel):
    amount: decimal.Decimal


def test_a_decimal_field_compiles_without_its_lookahead_as_response_format_and_tool():
    """The SDK's strict schema of a Decimal field: its pattern's digits are enforced, the
    look-ahead (no sign or dot alone) is not, as xgrammar leaves it."""
    schema = openai.pydantic_function_tool(Price)["function"]["parameters"]
    assert "(?!" in json.dumps(schema)
    tool = parse_tool_request({"tools": [openai.pydantic_function_tool(Price)],
                               "tool_choice": "required"}, None).grammar
    for spec in (GrammarSpec.json_schema(schema), tool):
        wrap = (lambda v: v) if spec is not tool else \
            (lambda v: [{"name": "Price", "parameters": v}])
        for good in ("12.50", "-0.5", 3.25, "+"):  # "+": the look-ahead is not enforced
            assert accepts(spec, wrap({"amount": good})), good
        for bad in ("12a", "1.2.3", "1e5", True):
            assert not accepts(spec, wrap({"amount": bad})), bad


@pytest.mark.parametrize("pattern, good, bad", [
    (r"^\d+(?=x)x(?!y)$", ["12x"], ["12", "x"]),  # look-aheads, positive and negative
    (r"^\((?!\))[(?=]+\)$", ["((?=)", "(?)"], ["(a)", "()"]),  # escaped ( and a class stay
    (r"^([a-c](?=(b|c)))+[b-c]$", ["ab", "abc"], ["ad", "a"]),  # nested in a group, balanced
    (r"^a(?=b)*?b$", ["ab"], ["a", "abb"]),  # its quantifier goes with it
])
def test_a_lookahead_in_a_pattern_is_dropped_and_the_rest_enforced(pattern, good, bad):
    spec = GrammarSpec.json_schema({"type": "string", "pattern": pattern})
    assert all(accepts(spec, v) for v in good) and not any(accepts(spec, v) for v in bad)


def test_pattern_properties_keys_lose_their_lookaround_and_still_pick_properties():
    spec = GrammarSpec.json_schema({"type": "object", "additionalProperties": False,
                                    "patternProperties": {"^(?!_)[a-z_]+$": {"type": "integer"}}})
    assert accepts(spec, {"ab": 1, "_c": 2}) and not accepts(spec, {"ab": "x"})
    assert not accepts(spec, {"A": 1})


@pytest.mark.parametrize("pattern, fixed", [
    (r"[z-a](?=b)", r"[a-z](?=b)"),  # the rest is no regex
    (r"(?=a(b)", r"(?=a)(b)"),  # unbalanced: nothing to cut out
    (r"(?<=a)b(?=c)", r"b(?=c)"),  # a look-behind: xgrammar refuses it too
])
def test_a_pattern_still_refused_without_its_lookahead_keeps_the_400(pattern, fixed):
    """The compiler's 400 on the pattern as sent; the same look-ahead well placed compiles."""
    assert accepts(GrammarSpec.json_schema({"type": "string", "pattern": fixed}), "b")
    with pytest.raises(RequestError, match="look-around|regex parse error"):
        GrammarSpec.json_schema({"type": "string", "pattern": pattern})


def test_a_schema_relaxes_at_most_max_relaxed_distinct_patterns():
    """Each rest is compiled alone first (NOTE(look-around)): a bounded number per schema;
    repeats of one pattern (a model's many Decimal fields) count once."""
    def schema(n: int, distinct: bool = True) -> dict:
        return {"type": "object", "properties": {f"p{i}": {"type": "string", "pattern": (
            rf"^(?!x)[a-z]{{{i if distinct else 1}}}$")} for i in range(n)}}

    spec = GrammarSpec.json_schema(schema(MAX_RELAXED))
    assert len(spec.probes) == MAX_RELAXED and "(?" not in json.dumps(spec.probes)
    assert len(GrammarSpec.json_schema(schema(4 * MAX_RELAXED, distinct=False)).probes) == 1
    with pytest.raises(RequestError, match="look-around"):
        GrammarSpec.json_schema(schema(MAX_RELAXED + 1))


def test_a_clients_own_regex_with_a_lookahead_stays_a_400():
    """The regex is the whole constraint there: nothing is dropped."""
    with pytest.raises(RequestError, match="look-around"):
        GrammarSpec.regex(r"(?!x)[a-z]+")
    GrammarSpec.json_schema({"type": "string", "pattern": r"(?!x)[a-z]+"})
