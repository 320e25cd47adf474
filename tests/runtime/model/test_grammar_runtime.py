"""What a grammar costs once it runs, with the real llguidance and the byte tokenizer:
NOTE(consume-budget) fails a grammar whose matcher costs more with every token (the engine
fails its request) and leaves a long legitimate output alone; a failure names the output token
where it happened and the token's id; NOTE(compile-cache) compiles a resent grammar once, hands
each sequence a fresh matcher, and refuses a cached refusal again naming the new field."""

from __future__ import annotations

import dataclasses

import pytest

from kvpool.errors import RequestError
from kvpool.runtime.model import build_byte_tokenizer
from kvpool.runtime.model.grammar import GrammarSpec
from kvpool.runtime.model.grammar_compile import CACHE_BYTES_PER_CHAR, GrammarCompiler
from kvpool.runtime.model.grammar_matchers import GrammarMatchers

TOK = build_byte_tokenizer()
VOCAB = 512
# 40 bytes that pass the probes, then cost more with every "a" (llguidance's Earley row grows
# ~5 items a token up to its 2,000-item limit, ~400 tokens in, at ~100 ms a token)
AMBIGUOUS = 'start: x\nx: x x | x x x | "a" | ""'
ROW_LIMIT_TOKEN = 399  # where llguidance's row limit alone would stop it


def ids(text: str) -> list[int]:
    return TOK.encode(text, add_special_tokens=False)


class CountingCompiler(GrammarCompiler):
    """The real compiler, counting the matchers it builds (one a compile, more with probes)."""

    built = 0

    def matcher(self, grammar: str):
        self.built += 1
        return super().matcher(grammar)


def test_an_ambiguous_grammar_fails_on_its_budget_long_before_the_row_limit():
    g = GrammarMatchers(TOK, VOCAB)
    g.add([7], g.compiler.compile(GrammarSpec.lark(AMBIGUOUS)))
    (a,) = ids("a")
    steps = 0
    while 7 not in g.failures and steps < ROW_LIMIT_TOKEN + 5:
        steps += 1
        assert g.advance([7], [a]) == []
    assert steps < 300, (steps, g.failures.get(7))  # ~125 here; the row limit: 399
    why = g.failures[7]
    assert why.startswith("response_format: the grammar failed at ")
    assert f"at output token {steps} (id {a})" in why and "over its CPU budget" in why, why
    g.remove(7)
    g.check_invariants(set())


def test_a_long_legitimate_output_stays_within_the_budget():
    g = GrammarMatchers(TOK, VOCAB)
    g.add([1], g.compiler.compile(GrammarSpec.json_object()))
    text = '{"a":[' + ",".join(["12345"] * 300) + '],"b":"' + "x" * 500 + '"}'
    for t in ids(text):
        g.advance([1], [t])
    assert not g.failures and 1 in g


def test_a_failure_names_the_output_token_and_its_id():
    """Output tokens count from the first one generated, those before a spec's ``after``
    token too (NOTE(think-grammar))."""
    g = GrammarMatchers(TOK, VOCAB)
    spec = g.compiler.compile(GrammarSpec.json_schema({"enum": ["red", "green"]}))
    end, bad = ids("#")[0], ids("x")[0]
    g.add([1], spec)
    g.add([2], dataclasses.replace(spec, after=end))
    g.advance([1, 2], [ids('"')[0], ids("q")[0]])
    g.advance([1, 2], [bad, ids("q")[0]])  # seq 1's 2nd token breaks it
    for t in [end, ids('"')[0], ids("r")[0], bad]:  # seq 2: free, its token, then read
        g.advance([2], [t])
    assert f"at output token 2 (id {bad})" in g.failures[1], g.failures[1]
    assert f"at output token 6 (id {bad})" in g.failures[2], g.failures[2]


def test_a_resent_grammar_compiles_once_and_each_sequence_starts_fresh():
    compiler = CountingCompiler(TOK, VOCAB)
    schema = {"type": "object", "properties": {"p": {"type": "string", "pattern": "^x{3}$"}},
              "required": ["p"], "additionalProperties": False}
    first = compiler.compile(GrammarSpec.json_schema(schema))
    built = compiler.built
    assert built >= 2  # the schema and its pattern, probed
    again = compiler.compile(dataclasses.replace(GrammarSpec.json_schema(schema), param="tools"))
    assert compiler.built == built and again.compiled is first.compiled and again.param == "tools"
    g = GrammarMatchers(TOK, VOCAB)
    g.add([1], first)
    for t in ids('{"p":"xxx"}'):
        g.advance([1], [t])
    g.add([2], again)  # after seq 1 completed the grammar: seq 2 still starts at "{"
    assert g.advance([2], ids("{")) == [] and not g.failures
    assert g.matchers[1].is_stopped() and not g.matchers[2].is_stopped()


def test_a_refusal_is_cached_and_names_each_request_field():
    compiler = CountingCompiler(TOK, VOCAB)
    loop = GrammarSpec.json_schema({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}})
    errors = []
    for param in ("response_format", "guided_json"):
        with pytest.raises(RequestError) as e:
            compiler.compile(dataclasses.replace(loop, param=param))
        errors.append(e.value)
        if param == "response_format":
            built = compiler.built
    assert compiler.built == built  # the second refusal built nothing
    assert [e.param for e in errors] == ["response_format", "guided_json"]
    assert str(errors[1]) == "guided_json" + str(errors[0]).removeprefix("response_format")


def test_the_cache_keeps_the_most_recently_used_within_its_bounds():
    regex = [GrammarSpec.regex(f"[a-z]{{{n}}}") for n in range(1, 5)]
    by_count = CountingCompiler(TOK, VOCAB, cache_entries=2)
    by_bytes = CountingCompiler(TOK, VOCAB, cache_bytes=2 * CACHE_BYTES_PER_CHAR * max(
        len(s.grammar) for s in regex) + 1)  # room for two of them
    for compiler in (by_count, by_bytes):
        for spec in regex[:3]:
            compiler.compile(spec)
        built = compiler.built
        compiler.compile(regex[2])  # still kept
        compiler.compile(regex[1])  # still kept; now regex[2] is the least recently used
        assert compiler.built == built
        compiler.compile(regex[3])  # pushes regex[2] out
        compiler.compile(regex[1])
        assert compiler.built == built + 1
        compiler.compile(regex[0])  # long gone
        assert compiler.built == built + 2
