"""What a grammar costs once it runs, with the real llguidance and the byte tokenizer:
NOTE(consume-budget) fails a grammar whose matcher costs more with every token (the engine
fails its request) and leaves a long legitimate output alone; a failure names the output token
where it happened and the token's id; NOTE(compile-cache) compiles a resent grammar once, hands
each sequence a fresh matcher, and refuses a cached refusal again naming the new field;
NOTE(compile-share) answers a cached grammar without queueing it behind a busy compile pool and
compiles identical grammars in flight once, whichever of their requests goes away."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest

from kvpool.errors import RequestError
from kvpool.runtime.engine.grammar_pool import GrammarPool
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

    def matcher(self, grammar: str, fuel: int | None = None):
        self.built += 1
        return super().matcher(grammar, fuel)


class GatedCompiler(GrammarCompiler):
    """The real compiler, listing its compiles; one of a grammar in ``held`` starts, says so,
    and waits for ``gate`` (at most 5 s: a pool that never frees it fails the test, not hangs)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.compiles: list[str] = []
        self.held: set[str] = set()
        self.started, self.gate = threading.Event(), threading.Event()

    def build(self, spec, key):
        self.compiles.append(spec.grammar)
        if spec.grammar in self.held:
            self.started.set()
            self.gate.wait(5)
        return super().build(spec, key)


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


LOOP = GrammarSpec.json_schema({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}})


async def test_identical_grammars_in_flight_compile_once():
    compiler = GatedCompiler(TOK, VOCAB)
    pool = GrammarPool(compiler, 2)
    spec = GrammarSpec.regex("[a-z]{5}")
    compiler.held.add(spec.grammar)
    params = [f"p{i}" for i in range(6)]
    asks = [dataclasses.replace(s, param=p) for s in (spec, LOOP) for p in params]
    tasks = [asyncio.create_task(pool.compile(a)) for a in asks]
    try:
        await asyncio.to_thread(compiler.started.wait, 5)  # a compile holds one thread
        compiler.gate.set()
        done = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        compiler.gate.set()
        pool.shutdown()
    assert sorted(compiler.compiles) == sorted([spec.grammar, LOOP.grammar])  # not 6 each
    assert [d.param for d in done] == [a.param for a in asks]  # each names its own field
    assert len({id(d.compiled) for d in done[:6]}) == 1 and done[0].compiled is not None
    assert all(isinstance(e, RequestError) for e in done[6:])


async def test_a_cached_grammar_is_answered_while_the_pool_is_busy():
    compiler = GatedCompiler(TOK, VOCAB)
    pool = GrammarPool(compiler, 1)
    kept, slow = GrammarSpec.regex("[a-z]{2}"), GrammarSpec.regex("[a-z]{9}")
    first = await pool.compile(kept)
    compiler.held.add(slow.grammar)
    order = []
    busy = asyncio.create_task(pool.compile(slow))
    busy.add_done_callback(lambda _: order.append("slow"))
    try:
        await asyncio.to_thread(compiler.started.wait, 5)  # the pool's one thread is held
        hit = await pool.compile(dataclasses.replace(kept, param="tools"))
        order.append("hit")
        compiler.gate.set()
        await busy
    finally:
        compiler.gate.set()
        pool.shutdown()
    assert order == ["hit", "slow"]  # not queued behind the held compile
    assert hit.compiled is first.compiled and hit.param == "tools"
    assert compiler.compiles == [kept.grammar, slow.grammar]


async def test_a_request_gone_leaves_its_shared_compile_to_the_others():
    compiler = GatedCompiler(TOK, VOCAB)
    pool = GrammarPool(compiler, 1)
    slow, queued = GrammarSpec.regex("[a-z]{9}"), GrammarSpec.regex("[a-z]{7}")
    compiler.held.add(slow.grammar)
    first = asyncio.create_task(pool.compile(slow))
    other = asyncio.create_task(pool.compile(dataclasses.replace(slow, param="tools")))
    gone = asyncio.create_task(pool.compile(queued))  # queued behind it, then no one waits
    try:
        await asyncio.to_thread(compiler.started.wait, 5)
        first.cancel()
        gone.cancel()
        await asyncio.gather(first, gone, return_exceptions=True)
        compiler.gate.set()
        got = await other  # the first request's cancellation was not its compile's
        assert first.cancelled() and got.param == "tools" and got.compiled is not None
        again = await pool.compile(queued)  # compiled now: no cancellation was kept
        assert (await pool.compile(slow)).compiled is got.compiled  # kept by the cache
    finally:
        compiler.gate.set()
        pool.shutdown()
    assert compiler.compiles == [slow.grammar, queued.grammar]  # the abandoned one never ran
    assert again.compiled is not None
