"""Long literals in structured outputs (kvpool/runtime/model/grammar_forcing.py NOTE(no-forcing),
NOTE(literal-bound)), through the real parser and compiler, read with the built-in byte
tokenizer. A run of bytes the grammar forces (a long const, an array of short consts, a choice
of one long option) is masked as vLLM's xgrammar masks it: every token that continues the run
is allowed. llguidance's forcing allowed only the run's canonical first token, which it found by
reading and tokenizing the whole rest of the run again every mask (~40 ms a mask on the step
thread for a 100,000-character const); a mask that allows the other tokens was computed without
that. A literal past MAX_LITERAL_BYTES is a 400 naming the field and the bound."""

from __future__ import annotations

import pytest
import torch

from kvpool.errors import RequestError
from kvpool.runtime.model.grammar import GrammarSpec, unpack_bitmask
from kvpool.runtime.model.grammar_forcing import MAX_LITERAL_BYTES
from kvpool.runtime.model.grammar_matchers import GrammarMatchers
from kvpool.server.sampling_fields import parse_response_format
from tests.server.test_tool_schema_parity import MATCHERS, TOK, accepts, as_format

VALUE = "value" * 6_000  # 30,000 characters: within the bound


def allowed_after(spec: GrammarSpec, text: str) -> set[bytes]:
    """The bytes of each token the compiled grammar allows once ``text`` is read."""
    m = GrammarMatchers.new_matcher(MATCHERS.compiler.compile(spec))
    for t in TOK.encode(text, add_special_tokens=False):
        assert m.consume_token(t), m.get_error()
    bits = torch.frombuffer(bytearray(m.compute_bitmask()), dtype=torch.int32)
    ids = unpack_bitmask(bits[None], MATCHERS.compiler.vocab_size)[0].nonzero().flatten()
    return {MATCHERS.compiler.lltokenizer.decode_bytes([i]) for i in ids.tolist()}


def test_a_forced_run_allows_every_token_that_continues_it():
    const = parse_response_format(as_format({"const": VALUE}))
    assert {b"v", b"value"} <= allowed_after(const, '"')
    assert {b"a", b"alue"} <= allowed_after(const, '"v')
    assert accepts(const, VALUE) and not accepts(const, VALUE[:-1] + "x")
    # a 200-byte schema forcing a run of ~100,000 bytes: 1,000 items of a 100-character const
    array = parse_response_format(as_format(
        {"type": "array", "items": {"const": "value" * 20}, "minItems": 1_000}))
    assert {b"v", b"value"} <= allowed_after(array, '["')
    assert {b"v", b"value"} <= allowed_after(GrammarSpec.choice(["value" * 2_000]), "")


@pytest.mark.parametrize("schema, what", [
    ({"const": "a" * 40_000}, "const value is 40002 bytes"),
    ({"type": "object", "properties": {"k": {"enum": ["ok", "é" * 20_000]}}},
     "enum value is 40002 bytes"),  # UTF-8: 2 bytes a character
    ({"type": "string", "pattern": "a" * 40_000}, r"pattern is 400\d\d bytes"),  # ^(?:...)$
])
def test_a_literal_past_the_bound_is_a_400_naming_the_field_and_the_bound(schema, what):
    bound = f"{what}( of JSON)?; at most {MAX_LITERAL_BYTES}$"
    with pytest.raises(RequestError, match=bound) as err:
        parse_response_format(as_format(schema))
    assert err.value.param == "response_format"
    assert str(err.value).startswith("response_format: ")
