"""vLLM's ``structured_outputs`` on every endpoint vLLM takes it on (/v1/completions,
/v1/chat/completions, /v1/responses; streamed and not), through a real server on 127.0.0.1
(tests/server/conftest.py ``srv``, the built-in tiny model at temperature 1.0): each kind holds
the output to its constraint, a malformed or constraint-less value is a 400 naming the field
(never a silently unconstrained 200), the pairs vLLM merges or refuses (beside
``response_format``, ``text.format``, a guided_* field) go as vLLM's go, and a hostile value
fails its own request only."""

from __future__ import annotations

import asyncio
import json
import re

import aiohttp
import jsonschema
import pytest

from tests.server.helpers import wait_free

ENDPOINTS = ("completions", "chat", "responses")
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                           "tag": {"enum": ["x", "yy", "zzz"]}},
          "required": ["ok", "tag"], "additionalProperties": False}
CHOICES = ["left", "right", "up down"]
# free text, but every "e" must open "e=" then 1 or 2 then ";" (a prefix: a cut may end in it)
TAG = {"type": "structural_tag", "triggers": ["e"],
       "structures": [{"begin": "e=", "schema": {"enum": [1, 2]}, "end": ";"}]}
TAGGED = re.compile(r"(?:[^e]|e=[12];)*(?:e(?:=[12]?)?)?", re.DOTALL)


def valid_json(t: str) -> bool:
    jsonschema.validate(json.loads(t), SCHEMA)
    return True


KINDS = {  # structured_outputs -> what every output must satisfy
    "json": ({"json": SCHEMA}, valid_json),
    "json text, closed": ({"json": json.dumps({k: v for k, v in SCHEMA.items()
                                               if k != "additionalProperties"}),
                           "disable_additional_properties": True}, valid_json),
    "regex": ({"regex": "[0-9]{3}-[a-c]{2}"},
              lambda t: re.fullmatch("[0-9]{3}-[a-c]{2}", t)),
    "choice": ({"choice": CHOICES}, lambda t: t in CHOICES),
    "lark": ({"grammar": 'start: "(" NUM ")" | "[" NUM "]"\nNUM: /[1-9]{1,2}/'},
             lambda t: re.fullmatch(r"\([1-9]{1,2}\)|\[[1-9]{1,2}\]", t)),
    "gbnf": ({"grammar": 'root ::= "yes" | "no" | "n/a"'}, lambda t: t in ("yes", "no", "n/a")),
    "json_object": ({"json_object": True, "disable_any_whitespace": True},
                    lambda t: isinstance(json.loads(t), dict)),
    "structural_tag": ({"structural_tag": TAG}, TAGGED.fullmatch),
}


def body_for(endpoint: str, max_tokens: int = 48, **extra) -> tuple[str, dict]:
    """The endpoint's path and a body of ``extra`` with its prompt and token cap."""
    if endpoint == "completions":
        return "/completions", {"prompt": "x", "max_tokens": max_tokens, **extra}
    if endpoint == "chat":
        return "/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                     "max_tokens": max_tokens, **extra}
    return "/responses", {"input": "hi", "max_output_tokens": max_tokens, **extra}


def text_of(endpoint: str, out: dict) -> tuple[str, bool]:
    """A non-streamed answer's text and whether it ended on its own (not at the token cap)."""
    if endpoint == "responses":
        items = [i for i in out["output"] if i["type"] == "message"]
        return "".join(p["text"] for p in items[0]["content"]), out["status"] == "completed"
    choice = out["choices"][0]
    text = choice["text"] if endpoint == "completions" else choice["message"]["content"]
    return text, choice["finish_reason"] == "stop"


def streamed_text(endpoint: str, events: list[dict]) -> str:
    if endpoint == "responses":
        return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    if endpoint == "completions":
        return "".join(c["text"] for e in events for c in e["choices"])
    return "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])


async def post(s: aiohttp.ClientSession, srv, endpoint: str, **extra) -> tuple[int, dict]:
    path, body = body_for(endpoint, **extra)
    async with s.post(srv.v1 + path, json=body) as r:
        return r.status, await r.json()


async def stream(s: aiohttp.ClientSession, srv, endpoint: str, **extra) -> list[dict]:
    path, body = body_for(endpoint, stream=True, **extra)
    async with s.post(srv.v1 + path, json=body) as r:
        assert r.status == 200, await r.text()
        return [json.loads(line[6:]) for line in (await r.text()).splitlines()
                if line.startswith("data: {")]


@pytest.mark.parametrize("kind", list(KINDS))
async def test_each_kind_constrains_every_endpoint(srv, kind):
    so, check = KINDS[kind]
    cap = 64 if kind == "structural_tag" else 200  # the tag's free text runs to the cap
    async with aiohttp.ClientSession() as s:
        for endpoint in ENDPOINTS:
            for seed in (1, 2):
                status, out = await post(s, srv, endpoint, structured_outputs=so, seed=seed,
                                         temperature=1.0, max_tokens=cap)
                assert status == 200, (endpoint, out)
                text, ended = text_of(endpoint, out)
                assert check(text), (endpoint, seed, text)
                assert ended or kind == "structural_tag", (endpoint, seed, text)
            events = await stream(s, srv, endpoint, structured_outputs=so, seed=1,
                                  temperature=1.0, max_tokens=cap)
            assert check(streamed_text(endpoint, events)), (endpoint, events)


MALFORMED = [
    ("ab+c", "structured_outputs"),  # not an object
    ({}, "structured_outputs"),  # no constraint: vLLM refuses it too
    ({"disable_any_whitespace": True}, "structured_outputs"),  # options alone
    ({"json_object": False}, "structured_outputs.json_object"),
    ({"regex": 5}, "structured_outputs.regex"),
    ({"regex": "("}, "structured_outputs.regex"),
    ({"regex": "a", "choice": ["b"]}, "structured_outputs.choice"),  # one kind only
    ({"choice": []}, "structured_outputs.choice"),
    ({"choice": ["a", 1]}, "structured_outputs.choice"),
    ({"grammar": "start: undefined_rule"}, "structured_outputs.grammar"),
    ({"json": {"type": "nope"}}, "structured_outputs.json"),
    ({"json": "{not json"}, "structured_outputs.json"),
    ({"structural_tag": {**TAG, "triggers": []}}, "structured_outputs.structural_tag"),
    ({"regex": "a", "disable_any_whitespace": "yes"},
     "structured_outputs.disable_any_whitespace"),
]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
async def test_malformed_values_are_400s_naming_the_field(srv, endpoint):
    free = srv.free()
    async with aiohttp.ClientSession() as s:
        for so, param in MALFORMED:
            for streamed in (False, True):  # refused before a stream opens
                status, out = await post(s, srv, endpoint, structured_outputs=so,
                                         stream=streamed)
                assert status == 400, (endpoint, so, out)
                err = out["error"]
                assert err["param"] == param and err["type"] == "invalid_request_error", (
                    endpoint, so, err)
                assert err["message"].startswith(f"{param}: "), err
    await wait_free(srv, free)
    assert srv.free() == free


async def test_responses_refuse_it_beside_text_format_as_vllm_does(srv):
    so = {"regex": "[0-9]{3}"}
    async with aiohttp.ClientSession() as s:
        for fmt in ({"type": "json_object"}, {"type": "text"},
                    {"type": "json_schema", "name": "t", "schema": SCHEMA}):
            status, out = await post(s, srv, "responses", structured_outputs=so,
                                     text={"format": fmt})
            assert status == 400 and out["error"]["param"] == "structured_outputs", out
        # text without a format, and a guided_* field (vLLM 0.33's Responses drops those:
        # an unknown field, listed as ignored): the constraint holds
        path, body = body_for("responses", structured_outputs=so, text={},
                              guided_regex="[a-z]+")
        async with s.post(srv.v1 + path, json=body) as r:
            out = await r.json()
            assert r.status == 200, out
            assert r.headers["X-Kvpool-Ignored-Fields"] == "guided_regex"
        assert re.fullmatch("[0-9]{3}", text_of("responses", out)[0]), out


async def test_beside_response_format_the_format_takes_its_kinds_place(srv):
    """vLLM's merge (guided_fields.py NOTE(format-over)) on chat and completions."""
    other = {"type": "json_schema", "json_schema": {"name": "rf", "schema": {"enum": ["rf"]}}}
    closed = {"type": "json_schema", "json_schema": {"name": "rf", "schema": {
        "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}}
    async with aiohttp.ClientSession() as s:
        for endpoint in ("completions", "chat"):
            status, out = await post(s, srv, endpoint, response_format=other,
                                     structured_outputs={"json": {"enum": ["so"]}})
            assert status == 200 and text_of(endpoint, out)[0] == '"rf"', out
            for seed in (1, 2, 3):  # the option keys stay: the format's object is closed
                status, out = await post(s, srv, endpoint, response_format=closed, seed=seed,
                                         temperature=1.0, max_tokens=64, structured_outputs={
                                             "json": {}, "disable_additional_properties": True})
                assert status == 200 and list(json.loads(text_of(endpoint, out)[0])) == ["ok"]
            status, out = await post(s, srv, endpoint, response_format={"type": "text"},
                                     structured_outputs={"choice": CHOICES})
            assert status == 200 and text_of(endpoint, out)[0] in CHOICES, out
            for extra in ({"response_format": {"type": "json_object"},
                           "structured_outputs": {"regex": "a"}},  # another kind
                          {"response_format": {"type": "json_object"}, "guided_regex": "a"}):
                status, out = await post(s, srv, endpoint, **extra)
                assert status == 400 and out["error"]["param"] == "response_format", out
            status, out = await post(s, srv, endpoint, guided_regex="a",
                                     structured_outputs={"choice": ["b"]})
            assert status == 400 and out["error"]["param"] == "structured_outputs.choice", out


def nested(depth: int) -> dict:
    schema: dict = {"type": "boolean"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema, "maxItems": 1}
    return schema


HOSTILE = [  # (structured_outputs, the status, the param)
    ({"regex": "x{100000}"}, 400, "structured_outputs.regex"),  # over the compile budget
    ({"regex": "((a{100}){100}){100}"}, 400, "structured_outputs.regex"),
    ({"regex": "(ab|cd|" * 3000 + "e" + ")" * 3000}, 400, "structured_outputs.regex"),
    ({"json": {"type": "object", "properties": {"a": {"type": "string",
                                                      "pattern": "^x{100000}$"}}}},
     400, "structured_outputs.json"),
    ({"json": json.dumps(nested(200))}, 400, "structured_outputs.json"),  # as JSON text
    ({"json": nested(200)}, 400, None),  # past the body's own depth bound
    ({"regex": "([a-z]{1,10}){500}"}, 500, "structured_outputs.regex"),  # breaks midway
]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
async def test_a_hostile_value_fails_only_its_own_request(srv, endpoint):
    free = srv.free()
    async with aiohttp.ClientSession() as s:
        plain = [post(s, srv, endpoint, max_tokens=8) for _ in HOSTILE]
        bad = [post(s, srv, endpoint, structured_outputs=so, max_tokens=200, seed=1,
                    temperature=1.0) for so, _, _ in HOSTILE]
        answers = await asyncio.gather(*bad, *plain)
        for (so, status, param), (got, out) in zip(HOSTILE, answers):
            assert got == status and out["error"]["param"] == param, (str(so)[:80], out)
        assert all(got == 200 for got, _ in answers[len(HOSTILE):]), answers
        assert (await post(s, srv, endpoint, structured_outputs={"choice": CHOICES}))[0] == 200
    await wait_free(srv, free)
    assert srv.free() == free


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"],
    "additionalProperties": False}}}]
NAMED = {"type": "function", "function": {"name": "f"}}


async def test_what_vllm_leaves_unheeded_is_listed_as_ignored(make_server):
    """guided_fields.py NOTE(so-unheeded): a key StructuredOutputsParams lacks is ignored; a
    tool_choice forcing a call drops the constraint (a named one beside json / regex / choice
    is vLLM's 400); each 200 lists what went unheeded in X-Kvpool-Ignored-Fields. The
    rendered tools need a longer context than the default server's."""
    async with make_server(max_model_len=1024, num_device_blocks=80) as srv, \
            aiohttp.ClientSession() as s:
        for endpoint in ENDPOINTS:
            path, body = body_for(endpoint, structured_outputs={"regex": "[0-9]{3}", "foo": 1})
            async with s.post(srv.v1 + path, json=body) as r:
                out = await r.json()
                assert r.status == 200, out
                assert r.headers["X-Kvpool-Ignored-Fields"] == "structured_outputs.foo"
            assert re.fullmatch("[0-9]{3}", text_of(endpoint, out)[0]), out
        for choice in ("required", NAMED):
            for so in ({"grammar": 'root ::= "no"'}, {"regex": "a"}):
                path, body = body_for("chat", 200, tools=TOOLS, tool_choice=choice,
                                      structured_outputs=so, parallel_tool_calls=False)
                async with s.post(srv.v1 + path, json=body) as r:
                    out = await r.json()
                    if choice == NAMED and "regex" in so:
                        assert r.status == 400 and out["error"]["param"] == "tool_choice", out
                        continue
                    assert r.status == 200, (choice, so, out)
                    assert r.headers["X-Kvpool-Ignored-Fields"] == "structured_outputs"
                call = out["choices"][0]["message"]["tool_calls"][0]["function"]
                assert call["name"] == "f" and "a" in json.loads(call["arguments"]), out
            status, out = await post(s, srv, "chat", tools=TOOLS, tool_choice=choice,
                                     structured_outputs={})  # validated before the drop
            assert status == 400 and out["error"]["param"] == "structured_outputs", out
            status, out = await post(s, srv, "responses", structured_outputs={"regex": "a"},
                                     tool_choice="required" if choice == "required" else
                                     {"type": "function", "name": "f"},
                                     tools=[{"type": "function", **TOOLS[0]["function"]}])
            assert status == 400 and out["error"]["param"] == "structured_outputs", out


async def test_whitespace_pattern_is_unheeded_and_listed_as_vllm_leaves_it(srv):
    """No vLLM 0.33 backend reads structured_outputs.whitespace_pattern (guided_fields.py
    NOTE(so-unheeded)): a 200 whose JSON stays compact (grammar.py NOTE(whitespace)), the
    key listed in X-Kvpool-Ignored-Fields; a value that is not a string is still a 400."""
    so = {"json": SCHEMA, "whitespace_pattern": "[ ]{1,3}"}
    async with aiohttp.ClientSession() as s:
        for endpoint in ENDPOINTS:
            path, body = body_for(endpoint, 200, structured_outputs=so, seed=1)
            async with s.post(srv.v1 + path, json=body) as r:
                out = await r.json()
                assert r.status == 200, out
                assert r.headers["X-Kvpool-Ignored-Fields"] == \
                    "structured_outputs.whitespace_pattern"
            text = text_of(endpoint, out)[0]
            assert valid_json(text) and " " not in text, text
            status, out = await post(s, srv, endpoint, structured_outputs={
                "regex": "a", "whitespace_pattern": 5})
            assert status == 400, out
            assert out["error"]["param"] == "structured_outputs.whitespace_pattern", out
