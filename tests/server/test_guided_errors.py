"""Invalid structured-output constraints through a real server on 127.0.0.1 (real engine, the
tiny model), in every field spelling a client may send them in (vLLM's guided_*,
structured_outputs.*, OpenAI's response_format, tools): each is a 400 in OpenAI's error JSON
whose ``param`` and message name the field the client sent, whether the parser refuses it or
the compile on the worker thread does; no block leaks and the next request is served."""

from __future__ import annotations

import json

import aiohttp
import pytest

from tests.server.helpers import wait_free

LOOP = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}  # allows nothing


def string(pattern: str) -> dict:
    return {"type": "string", "pattern": pattern}


def spellings(kind: str, value) -> list[tuple[str, dict]]:
    """(the param a 400 must name, the body fields) for each spelling of one constraint."""
    out = [(f"guided_{kind}", {f"guided_{kind}": value}),
           (f"structured_outputs.{kind}", {"structured_outputs": {kind: value}})]
    if kind == "json" and isinstance(value, dict):
        out.append(("response_format", {"response_format": {
            "type": "json_schema", "json_schema": {"name": "t", "schema": value}}}))
    return out


# NOTE(trailing-backslash) in grammar.py: llguidance dropped these backslashes (a 200)
TRAILING_BACKSLASH = [
    *spellings("regex", "\\"), *spellings("regex", "a\\"), *spellings("regex", "\\\\\\"),
    *spellings("json", string("\\")), *spellings("json", string("ab\\")),
    *spellings("json", {"type": "object", "patternProperties": {"x\\": {}}}),
    *spellings("json", {"type": "array", "items": string("^a\\")}),
]
# refused by the compile on the worker thread, which named response_format for every field
AT_COMPILE = [
    *spellings("regex", "x{100000}"), *spellings("grammar", 'start: a\na: a "x"'),
    *spellings("grammar", 'root ::= root "x"'), *spellings("json", LOOP),
    *spellings("json", json.dumps(LOOP)),
    ("structured_outputs.structural_tag", {"structured_outputs": {"structural_tag": {
        "type": "structural_tag", "triggers": ["<f>"],
        "structures": [{"begin": "<f>", "schema": LOOP, "end": "</f>"}]}}}),
]
# invalid but parseable: refused by the parser (kept so no spelling regresses)
AT_PARSE = [
    *spellings("regex", "(ab"), *spellings("regex", "ab)"), *spellings("regex", "a{3,1}"),
    *spellings("regex", "(?<=a)b"), *spellings("regex", "(a)\\1"),
    *spellings("regex", "(?P<x>a)(?P=x)"), *spellings("regex", "[z-a]"),
    *spellings("grammar", "start: ("), *spellings("grammar", "root ::= ("),
    *spellings("grammar", "start: /a{3,1}/"), *spellings("grammar", "x: \"a\""),
    *spellings("json", {"type": "nope"}), *spellings("json", string("(a")),
    *spellings("json", string("(?<=a)b")), *spellings("json", "{not json"),
    *spellings("choice", []), *spellings("choice", [1, 2]), *spellings("choice", ["a", None]),
    *spellings("choice", "a"), *spellings("choice", [["a"]]),
]


async def post(s: aiohttp.ClientSession, url: str, body: dict) -> tuple[int, dict]:
    async with s.post(url, json=body) as r:
        return r.status, await r.json()


def route_and_base(chat: bool) -> tuple[str, dict]:
    """The route and the body's prompt part: chat completions or completions."""
    return (("/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}) if chat
            else ("/completions", {"prompt": "hi"}))


async def served_and_nothing_leaked(srv, s: aiohttp.ClientSession, free: int) -> None:
    """A plain request is served after the refusals, and every block is back."""
    status, body = await post(s, srv.v1 + "/completions",
                              {"prompt": "hi", "max_tokens": 4, "temperature": 0})
    assert status == 200 and body["choices"][0]["finish_reason"] == "length", body
    await wait_free(srv, free)
    assert srv.free() == free


async def check_refused(srv, cases: list[tuple[str, dict]], chat_only: bool = False) -> None:
    """Each case a 400 naming its param, on both routes (every other case on chat); then a
    request served, nothing leaked."""
    free = srv.free()
    async with aiohttp.ClientSession() as s:
        for i, (param, fields) in enumerate(cases):
            route, base = route_and_base(bool(i % 2 or chat_only))
            status, body = await post(s, srv.v1 + route, {**base, "max_tokens": 4, **fields})
            assert status == 400, (fields, body)
            err = body["error"]
            assert err["param"] == param and err["type"] == "invalid_request_error", (fields, err)
            assert err["message"].startswith(f"{param}: "), (fields, err)
            assert "response_format" not in err["message"].replace(param, ""), (fields, err)
        await served_and_nothing_leaked(srv, s, free)


async def test_a_trailing_backslash_is_an_invalid_regex_in_every_spelling(srv):
    await check_refused(srv, TRAILING_BACKSLASH)


async def test_compile_errors_name_the_field_sent(srv):
    await check_refused(srv, AT_COMPILE)


async def test_a_forced_tool_schema_that_allows_nothing_names_tools(make_server):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "required": ["a"],
        "$defs": {"a": {"$ref": "#/$defs/a"}}}}}]
    async with make_server(max_model_len=1024, num_device_blocks=80) as srv:
        await check_refused(srv, [("tools", {"tools": tools, "tool_choice": "required"})],
                            chat_only=True)


@pytest.mark.parametrize("half", [0, 1])
async def test_invalid_patterns_are_400s_naming_their_spelling(srv, half):
    await check_refused(srv, AT_PARSE[half::2])


async def test_escaped_backslashes_stay_valid(srv):
    async with aiohttp.ClientSession() as s:
        for fields in ({"guided_regex": "a\\\\"}, {"structured_outputs": {"regex": "\\\\"}},
                       {"guided_json": string("^a\\\\$")}):
            status, body = await post(s, srv.v1 + "/completions",
                                      {"prompt": "hi", "max_tokens": 8, **fields})
            assert status == 200, (fields, body)
            text = body["choices"][0]["text"]
            if "guided_json" in fields:
                assert json.loads(text) == "a\\", text
            else:
                assert text.strip("a") == "\\", text


# passes the compile's probes, then its masks run out of fuel a few dozen tokens in (as
# test_grammar_budget.py's BREAKS_MIDWAY): grammar_matchers.py NOTE(grammar-error)
MIDWAY_REGEX = "([a-z]{1,10}){500}"
MIDWAY = [*spellings("regex", MIDWAY_REGEX), *spellings("json", string(f"^{MIDWAY_REGEX}$"))]


async def fail_midway(s: aiohttp.ClientSession, url: str, body: dict) -> list[dict]:
    """The errors of ``body`` sent plain and streamed (the stream's last event)."""
    status, plain = await post(s, url, body)
    assert status == 500, plain
    async with s.post(url, json={**body, "stream": True}) as r:
        assert r.status == 200
        events = [json.loads(line[6:]) for line in (await r.text()).splitlines()
                  if line.startswith("data: {")]
    assert not [c for e in events for c in e.get("choices", ())
                if c.get("finish_reason") not in (None, "error")], events
    return [plain["error"], events[-1]["error"]]


async def test_a_grammar_that_breaks_midway_names_the_field_sent(srv):
    free = srv.free()
    async with aiohttp.ClientSession() as s:
        for i, (param, fields) in enumerate(MIDWAY):
            route, base = route_and_base(bool(i % 2))
            body = {**base, "max_tokens": 200, "temperature": 1.0, "seed": 1, **fields}
            for err in await fail_midway(s, srv.v1 + route, body):
                assert err["code"] == "generation_error" and err["param"] == param, (param, err)
                assert err["message"].startswith(f"generation failed: {param}: the grammar "
                                                 "failed"), (param, err)
                assert "response_format" not in err["message"].replace(param, ""), err
        await served_and_nothing_leaked(srv, s, free)


async def test_a_grammar_that_allows_nothing_says_why_per_kind(srv):
    hints = {"guided_regex": ("[^\\s\\S]", "no string matches it"),
             "guided_grammar": ('start: a\na: a "x"', "a recursion with no base case"),
             "guided_json": (LOOP, "(a $ref cycle?)")}
    async with aiohttp.ClientSession() as s:
        for param, (value, hint) in hints.items():
            status, body = await post(s, srv.v1 + "/completions",
                                      {"prompt": "hi", "max_tokens": 4, param: value})
            assert status == 400 and body["error"]["param"] == param, body
            msg = body["error"]["message"]
            assert "allows no value at all" in msg and hint in msg, msg
            assert "$ref" not in msg or param == "guided_json", msg
