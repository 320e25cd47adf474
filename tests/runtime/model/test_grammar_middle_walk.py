"""NOTE(middle-walk) in grammar_compile.py: a grammar whose first-token walk stays small but
whose other ways exceed llguidance's step item limit a few tokens in is refused at compile (a
400 naming the field), not after its request generated 3 tokens (an HTTP 500 before)."""

from __future__ import annotations

import pytest

from kvpool.errors import RequestError
from kvpool.runtime.model import build_byte_tokenizer
from kvpool.runtime.model.grammar import GrammarSpec
from kvpool.runtime.model.grammar_compile import GrammarCompiler

COMPILER = GrammarCompiler(build_byte_tokenizer(), 520)


def _words(n: int) -> GrammarSpec:
    return GrammarSpec.lark("start: item+\nitem: " + " | ".join(f'"w{i}"' for i in range(n)))


def test_a_grammar_too_wide_past_its_first_way_is_refused_at_compile():
    with pytest.raises(RequestError) as err:
        COMPILER.compile(_words(1900))
    assert "Too many items" in str(err.value) and err.value.param == "response_format"


def test_a_narrower_one_still_compiles():
    assert COMPILER.compile(_words(1000)).compiled is not None
