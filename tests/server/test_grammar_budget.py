"""Hostile response_format grammars through a real server on 127.0.0.1 (real engine, the tiny
model): a grammar too large for its budget or one that allows nothing is a 400 naming
response_format before it runs; one that breaks mid-generation ends in an error, never a
"stop"; a heavy accepted grammar beside a plain request leaves the plain request's tokens
exactly what they are alone (its latency: bench/structured.py, neighbour_ms)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from kvpool.errors import RequestError
from kvpool.runtime.model import SamplingParams
from kvpool.runtime.model.grammar import GrammarSpec
from tests.server.helpers import wait_free

HUGE = "^(abc){1000000000}$"


def fmt(schema) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}


def string(pattern: str) -> dict:
    return {"type": "string", "pattern": pattern}


REJECTED = {
    "huge repeat": string(HUGE),
    "long repeat": string("^x{100000}$"),
    "nested repeats": string("^((a{100}){100}){100}$"),
    "huge repeat in a property": {"type": "object", "properties": {
        "a": {"type": "integer"}, "b": string(HUGE)}, "required": ["a", "b"]},
    "huge property-name pattern": {"type": "object",
                                   "patternProperties": {"^x{100000}$": {"type": "integer"}}},
    "$ref loop": {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}},
    "$ref loop in a property": {
        "type": "object", "properties": {"a": {"$ref": "#/$defs/b"}}, "required": ["a"],
        "$defs": {"b": {"$ref": "#/$defs/c"}, "c": {"$ref": "#/$defs/b"}}},
}
# a heavy grammar the budget still admits (~10 ms a mask here while masks forced its run;
# ~0.01 ms since grammar_forcing.py NOTE(no-forcing): its lexer states are what it costs)
HEAVY = string("^x{10000}$")


async def post(s: aiohttp.ClientSession, url: str, body: dict) -> tuple[int, dict]:
    async with s.post(url, json=body) as r:
        return r.status, await r.json()


async def test_over_budget_and_empty_grammars_are_400s_naming_response_format(srv):
    free = srv.free()
    async with aiohttp.ClientSession() as s:
        for name, schema in REJECTED.items():
            for n in (1, 4):
                status, body = await post(s, srv.v1 + "/chat/completions", {
                    "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "n": n,
                    "response_format": fmt(schema)})
                assert status == 400, (name, body)
                err = body["error"]
                assert err["param"] == "response_format", (name, err)
                assert err["type"] == "invalid_request_error" and len(err["message"]) < 400
        status, body = await post(s, srv.v1 + "/completions",
                                  {"prompt": "hi", "max_tokens": 4, "temperature": 0})
        assert status == 200 and body["choices"][0]["finish_reason"] == "length"
    await wait_free(srv, free)
    assert srv.free() == free


# passes the probes (PROBE_STEPS masks), then needs more lexer states with every letter: its
# masks run out of fuel a few dozen tokens in
BREAKS_MIDWAY = string("^([a-z]{1,10}){500}$")


async def test_a_grammar_that_breaks_midway_is_an_error_never_a_stop(srv):
    free = srv.free()
    req = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 200,
           "response_format": fmt(BREAKS_MIDWAY), "temperature": 1.0, "seed": 1}
    async with aiohttp.ClientSession() as s:
        status, body = await post(s, srv.v1 + "/chat/completions", {**req, "n": 2})
        assert status == 500, body
        assert "response_format" in body["error"]["message"], body
        async with s.post(srv.v1 + "/chat/completions",
                          json={**req, "stream": True}) as r:
            assert r.status == 200
            events = [json.loads(line[6:]) for line in (await r.text()).splitlines()
                      if line.startswith("data: {")]
        reasons = [c["finish_reason"] for e in events for c in e.get("choices", ())
                   if c.get("finish_reason")]
        assert "stop" not in reasons, reasons
        assert "response_format" in events[-1]["error"]["message"], events[-1]
    await wait_free(srv, free)
    assert srv.free() == free


# 40 bytes that pass the probes, then cost more CPU with every token (NOTE(consume-budget))
AMBIGUOUS = 'start: x\nx: x x | x x x | "a" | ""'


async def test_an_ambiguous_grammar_fails_alone_on_its_cpu_budget(srv):
    """Without the budget it ran to max_tokens (llguidance's row limit is ~400 tokens away),
    holding the step thread and the GIL ever longer each token."""
    free = srv.free()
    plain = {"prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0,
             "ignore_eos": True}
    hostile = {"prompt": "a", "max_tokens": 240, "min_tokens": 230, "temperature": 1.0,
               "seed": 1, "guided_grammar": AMBIGUOUS}
    async with aiohttp.ClientSession() as s:
        (status, body), (plain_status, _) = await asyncio.gather(
            post(s, srv.v1 + "/completions", hostile), post(s, srv.v1 + "/completions", plain))
        assert plain_status == 200
        assert status == 500 and body["error"]["code"] == "generation_error", body
        message = body["error"]["message"]
        assert "guided_grammar: the grammar failed at output token " in message, body
        assert body["error"]["param"] == "guided_grammar"
        assert "over its CPU budget" in message, body
    await wait_free(srv, free)
    assert srv.free() == free


async def test_a_plain_request_beside_a_heavy_grammar_gets_its_own_tokens(srv):
    free = srv.free()
    plain = {"prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0,
             "ignore_eos": True}
    heavy = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 48, "n": 4,
             "temperature": 1.0, "seed": 3, "response_format": fmt(HEAVY)}
    async with aiohttp.ClientSession() as s:
        status, alone = await post(s, srv.v1 + "/completions", plain)
        assert status == 200
        heavy_task = asyncio.create_task(post(s, srv.v1 + "/chat/completions", heavy))
        await asyncio.sleep(0.05)  # the heavy request is compiled and decoding
        status, beside = await asyncio.wait_for(post(s, srv.v1 + "/completions", plain), 60)
        assert status == 200
        assert beside["choices"][0]["text"] == alone["choices"][0]["text"]
        assert beside["usage"]["completion_tokens"] == 8
        status, body = await asyncio.wait_for(heavy_task, 120)
        assert status == 200, body
        for ch in body["choices"]:  # max_tokens long: only x's after the opening quote
            assert ch["finish_reason"] == "length"
            assert ch["message"]["content"].startswith('"')
            assert set(ch["message"]["content"][1:]) <= {"x"}
    await wait_free(srv, free)
    assert srv.free() == free


async def test_generate_takes_only_compiled_grammars(srv):
    """The step thread never compiles: an uncompiled spec is refused at the door."""
    spec = GrammarSpec.json_object()
    params = SamplingParams(max_tokens=4, response_format=spec)
    with pytest.raises(RequestError) as e:
        srv.engine.generate(None, "hi", params)
    assert e.value.param == "response_format"
    compiled = await srv.engine.compile_grammar(params)
    assert compiled.response_format.compiled is not None
    assert spec.compiled is None  # the parsed spec is left as it was
