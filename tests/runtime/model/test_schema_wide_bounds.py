"""Numeric bounds past 2**53 in a JSON schema, compiled with the real compiler and read token by
token with the built-in byte tokenizer (kvpool/runtime/model/grammar_relax.py,
NOTE(int64-bounds)): llguidance reads a bound as an f64, so each such bound is moved inward to an
f64 it enforces exactly. Every number the compiled grammar accepts satisfies the bound as sent,
compared exactly; the values next to the bound inside it are not all refused."""

from __future__ import annotations

import decimal
import json
import math

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.errors import RequestError
from kvpool.runtime.model import build_byte_tokenizer
from kvpool.runtime.model.grammar import GrammarSpec
from kvpool.runtime.model.grammar_matchers import GrammarMatchers
from kvpool.server.structural_tag import parse_structural_tag

TOK = build_byte_tokenizer()
MATCHERS = GrammarMatchers(TOK, 520)
I64 = 2 ** 63
EDGES = (I64 - 1, I64 - 1024, -I64, -I64 + 1024)  # i64's ends and the f64s inside them
LOWER = ("minimum", "exclusiveMinimum")
TYPES = ("integer", "number", ["integer", "null"])


def accepts(spec: GrammarSpec, text: str) -> bool:
    """Whether the compiled grammar generates ``text`` whole."""
    m = GrammarMatchers.new_matcher(MATCHERS.compiler.compile(spec))
    ids = TOK.encode(text, add_special_tokens=False)
    if m.validate_tokens(ids) != len(ids):
        return False
    m.consume_tokens(ids)
    return m.is_accepting()


def holds(schema: dict, text: str, read=decimal.Decimal) -> bool:
    """JSON Schema's bounds on the number ``text``, compared exactly (``read=json.loads``: as
    a client's validator reads a decimal, an f64)."""
    v = read(text)
    checks = {"minimum": lambda b: v >= b, "exclusiveMinimum": lambda b: v > b,
              "maximum": lambda b: v <= b, "exclusiveMaximum": lambda b: v < b}
    return all(check(schema[k]) for k, check in checks.items() if k in schema)


def near(bound: int | float) -> list[int]:
    """Integers beside ``bound``, beside the f64s around it and their shortest decimals, and
    at i64's ends."""
    out = {int(bound) + d for d in range(-3, 4)} | set(EDGES)
    if abs(bound) < 2.0 ** 1000:
        f = float(bound)
        for g in (f, math.nextafter(f, math.inf), math.nextafter(f, -math.inf)):
            shortest = int(decimal.Decimal(repr(g)))  # what a number's range reads
            out |= {int(g) - 1, int(g), int(g) + 1, shortest - 1, shortest, shortest + 1}
    return sorted(out)


_MAGNITUDE = st.one_of(st.integers(2 ** 53 - 8, 2 ** 53 + 4096), st.integers(2 ** 53, I64 + 4096),
                       st.integers(I64 - 4096, I64 + 4096),
                       st.sampled_from([10 ** k + d for k in range(15, 20) for d in (-1, 0, 1)]))
BOUND = st.tuples(_MAGNITUDE, st.booleans(), st.booleans()).map(
    lambda t: (-t[0] if t[1] else t[0]) if not t[2] or abs(t[0]) > I64 + 4096 else
    float(-t[0] if t[1] else t[0]))


@settings(max_examples=30, deadline=None)
@given(BOUND, st.sampled_from(LOWER + ("maximum", "exclusiveMaximum")),
       st.sampled_from(TYPES))
def test_every_accepted_number_satisfies_a_bound_past_2_53_exactly(bound, key, kind):
    """The bound beside a far one on the other side (i64's end, itself moved inward): a 400
    only where no f64 llguidance builds lies inside the bound."""
    far = {"maximum": I64 - 1} if key in LOWER else {"minimum": -I64}
    schema = {"type": kind, key: bound, **far}
    try:
        spec = GrammarSpec.json_schema(schema)
    except RequestError:
        ends = (-I64 + 1024, I64 - 1 if kind != "number" else I64 - 1024)
        assert not any(holds({key: bound}, str(v)) for v in ends), schema
        return
    texts = [str(n) for n in near(bound)]
    texts += [t + ".5" for t in texts] if kind == "number" else []
    accepted = [t for t in texts if accepts(spec, t)]
    assert all(holds(schema, t) for t in accepted), (schema, accepted)
    assert accepted, schema  # the f64 inside the bound is among the candidates


@pytest.mark.parametrize("bound, bad, good", [
    ({"maximum": 9007199254740999}, [9007199254741000], [9007199254740998]),
    ({"maximum": 99999999999999999}, [10 ** 17], [99999999999999984]),
    ({"exclusiveMaximum": 10 ** 18}, [10 ** 18], [10 ** 18 - 128]),
    ({"exclusiveMaximum": 2 ** 60}, [2 ** 60], [2 ** 60 - 256]),
    ({"exclusiveMaximum": I64 - 1}, [I64 - 1], [I64 - 1024]),
    ({"minimum": 9007199254740993}, [9007199254740992], [9007199254740994]),
    ({"exclusiveMinimum": 2 ** 53}, [2 ** 53], [2 ** 53 + 2]),
])
def test_the_probes_bounds_past_2_53_hold(bound, bad, good):
    """The outside probe's cases (each accepted by llguidance as sent): a value past the bound
    is refused, the f64 inside it generated."""
    far = {"maximum": I64 - 1} if set(bound) & set(LOWER) else {"minimum": 0}
    spec = GrammarSpec.json_schema({"type": "integer", **bound, **far})
    assert not any(accepts(spec, str(v)) for v in bad)
    assert all(accepts(spec, str(v)) for v in good)


@pytest.mark.parametrize("bound", [
    {"minimum": -I64}, {"minimum": -I64 + 1}, {"minimum": -I64 + 512},
    {"exclusiveMinimum": -I64}, {"minimum": float(-I64)}, {"minimum": -10 ** 30}])
def test_an_integer_lower_bound_at_int64s_edge_compiles_at_the_least_f64_inside(bound):
    """llguidance cannot build a lower bound of -2**63: it becomes -2**63 + 1024, the least
    f64 above (what is lost: the 1024 least int64s), and nothing below it is generated."""
    spec = GrammarSpec.json_schema({"type": "integer", **bound, "maximum": 5})
    assert accepts(spec, str(-I64 + 1024)) and accepts(spec, "5") and not accepts(spec, "6")
    assert not accepts(spec, str(-I64)) and not accepts(spec, str(-I64 + 1023))


def test_pydantic_int64_fields_compile_and_every_bound_holds():
    int64 = pydantic.TypeAdapter(pydantic.conint(ge=-I64, le=I64 - 1)).json_schema()
    spec = GrammarSpec.json_schema(int64)
    assert accepts(spec, str(-I64 + 1024)) and accepts(spec, str(I64 - 1))
    assert not accepts(spec, str(I64)) and not accepts(spec, str(-I64)) and accepts(spec, "0")
    near_edge = GrammarSpec.json_schema({"type": "integer", "minimum": -I64 + 1024})
    assert accepts(near_edge, str(-I64 + 1024)) and not accepts(near_edge, str(-I64 + 1023))
    number = GrammarSpec.json_schema({"type": ["number", "null"], "minimum": -I64,
                                      "exclusiveMaximum": float(I64), "multipleOf": 0.5})
    assert accepts(number, "1.5") and accepts(number, "null") and not accepts(number, "1.25")
    assert not accepts(number, str(I64 - 512)) and accepts(number, str(I64 - 1024))


@pytest.mark.parametrize("schema, refused, accepted", [
    ({"type": "number", "maximum": 1e300}, ["1e300", str(I64)], ["1.5", str(I64 - 1024)]),
    ({"type": "number", "minimum": float("-inf")}, [], ["-1e30", "-" + "9" * 30]),
    ({"maximum": 0.1}, ["0.10000000000000001", "0.2"], ["0.1", "-3"]),
    ({"exclusiveMinimum": 0.3}, ["0.3", "0.29999999999999999"], ["0.30000000000000001"]),
])
def test_number_bounds_hold_as_their_f64_decimal(schema, refused, accepted):
    """A number's bound past i64's range moves inside it (1e300 fails to build as sent); one
    inside is enforced as the shortest decimal of its f64 (what the JSON decoder read)."""
    spec = GrammarSpec.json_schema(schema)
    assert not any(accepts(spec, v) for v in refused) and all(accepts(spec, v) for v in accepted)
    assert all(holds(schema, v) for v in accepted)


def test_bounds_inside_2_53_are_compiled_as_sent():
    schema = {"type": "integer", "minimum": -(2 ** 53) + 1, "exclusiveMaximum": 2 ** 53 - 1}
    spec = GrammarSpec.json_schema(schema)
    assert accepts(spec, str(2 ** 53 - 2)) and not accepts(spec, str(2 ** 53 - 1))
    assert accepts(spec, str(-(2 ** 53) + 1)) and not accepts(spec, str(-(2 ** 53)))


@settings(max_examples=40, deadline=None)
@given(st.floats(1e-4, 1e12), st.booleans(), st.sampled_from(LOWER + ("maximum",
                                                                      "exclusiveMaximum")))
def test_a_numbers_long_float_bound_holds_exactly(value, negative, key):
    """A float of 16-17 significant digits (0.1 + 0.2), which llguidance's JSON reader may read
    an ulp outward: it is rounded inward to 15 digits, and the f64s around it obey it."""
    bound = -value if negative else value
    schema = {"type": "number", key: bound}
    spec = GrammarSpec.json_schema(schema)
    up, down = math.nextafter(bound, math.inf), math.nextafter(bound, -math.inf)
    around = (bound, up, down, math.nextafter(up, math.inf), math.nextafter(down, -math.inf))
    texts = [repr(f) for f in around if "e" not in repr(f)]  # the grammar writes no exponent
    assert all(holds(schema, t, json.loads) for t in texts if accepts(spec, t)), schema


@pytest.mark.parametrize("bounds", [{"minimum": -1e20, "maximum": -1e20},
                                    {"minimum": -I64, "maximum": -I64 + 1000},
                                    {"minimum": 5, "exclusiveMinimum": I64 - 1}])
def test_a_range_past_int64_is_a_400_and_never_reaches_the_compiler(bounds):
    """llguidance crashes the process on an integer range at i64's minimum (both bounds there),
    and a structural tag compiles its schemas as sent once each has compiled alone: the alone
    compile must refuse it, even in an optional property."""
    schema = {"type": "object", "properties": {"a": {"type": "integer", **bounds}}}
    tag = {"type": "structural_tag", "structures": [{"begin": "<f>", "schema": schema,
                                                     "end": "</f>"}], "triggers": ["<f>"]}
    with pytest.raises(RequestError, match="past the compiler's range"):
        parse_structural_tag(tag, "structured_outputs")
