"""A chat tool_choice forcing a call (``required`` or named) beside a structured-output field,
through a real server on 127.0.0.1 (the built-in tiny model): as vLLM 0.33's tool parser
replaces ``structured_outputs`` and sets ``response_format`` to None (and never reads the
legacy ``guided_*``), each is answered with a 200 carrying the forced call and listed in
``X-Kvpool-Ignored-Fields`` (kvpool/server/forced_tool_fields.py NOTE(tool-forced)); what
vLLM's request model refuses first stays a 400."""

from __future__ import annotations

import json

import aiohttp

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"],
    "additionalProperties": False}}}]
NAMED = {"type": "function", "function": {"name": "f"}}
FORMAT = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"enum": ["no"]}}}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 200, "tools": TOOLS,
        "parallel_tool_calls": False, "seed": 1}
DROPPED = [  # the fields beside the forcing choice -> what the header lists
    ({"response_format": FORMAT}, "response_format"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"guided_regex": "no"}, "guided_regex"),
    ({"guided_json": "{not a schema"}, "guided_json"),  # vLLM never reads it
    ({"structured_outputs": {"grammar": 'root ::= "no"'}, "response_format": FORMAT,
      "guided_choice": ["no"]}, "structured_outputs,response_format,guided_choice"),
]


def the_call(out: dict) -> dict:
    assert out["choices"][0]["message"]["content"] == "", out  # NOTE(forced-content)
    call = out["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "f" and isinstance(json.loads(call["arguments"])["a"], bool), out
    return call


async def test_a_forcing_tool_choice_drops_the_constraint_fields(make_server):
    async with make_server(max_model_len=1024, num_device_blocks=80) as srv, \
            aiohttp.ClientSession() as s:
        url = srv.v1 + "/chat/completions"
        for choice in ("required", NAMED):
            for extra, listed in DROPPED:
                body = {**CHAT, "tool_choice": choice, **extra}
                async with s.post(url, json=body) as r:
                    out = await r.json()
                    assert r.status == 200, (choice, extra, out)
                    assert r.headers["X-Kvpool-Ignored-Fields"] == listed, (choice, extra)
                the_call(out)
            async with s.post(url, json={**CHAT, "tool_choice": choice, "stream": True,
                                         "response_format": FORMAT}) as r:
                assert r.status == 200 and "tool_calls" in await r.text()
                assert r.headers["X-Kvpool-Ignored-Fields"] == "response_format"
            async with s.post(url, json={**CHAT, "tool_choice": choice,
                                         "response_format": {"type": "nope"}}) as r:
                out = await r.json()  # read before the drop, as vLLM's model reads it
                assert r.status == 400 and out["error"]["param"] == "response_format", out
        body = {"input": "hi", "max_output_tokens": 200, "tool_choice": "required",
                "tools": [{"type": "function", **TOOLS[0]["function"]}],
                "text": {"format": {"type": "json_object"}}}
        async with s.post(srv.v1 + "/responses", json=body) as r:
            out = await r.json()
            assert r.status == 200, out
            assert r.headers["X-Kvpool-Ignored-Fields"] == "text.format"
        assert {i["name"] for i in out["output"] if i["type"] == "function_call"} == {"f"}


RESP_TOOLS = [{"type": "function", "name": "f", "parameters": {
    "type": "object", "properties": {"a": {"$ref": "#/$defs/B"}}, "required": ["a"],
    "$defs": {"B": {"type": "boolean"}}}}, {"type": "function", "name": "g"}]


def tool_calling_response(schema: dict) -> dict:
    return {"format": {"type": "json_schema", "name": "tool_calling_response",
                       "schema": schema, "strict": True, "description": None},
            "verbosity": None}


async def test_a_forced_responses_call_echoes_vllms_tool_text_format(make_server):
    """NOTE(forced-text): vLLM's tool parser makes the request's ``text`` the forced call's
    schema, and the response (created, completed, stored) echoes that, not the client's."""
    params = {k: v for k, v in RESP_TOOLS[0]["parameters"].items() if k != "$defs"}
    item = {"type": "object", "anyOf": [
        {"properties": {"name": {"type": "string", "enum": [n]}, "parameters": p},
         "required": ["name", "parameters"]}
        for n, p in (("f", params), ("g", {"type": "object", "properties": {}}))]}
    required = {"type": "array", "minItems": 1, "items": item, "maxItems": 1,
                "$defs": {"B": {"type": "boolean"}}}
    cases = [({"tool_choice": "required", "parallel_tool_calls": False,
               "text": {"format": {"type": "json_object"}}}, required),
             ({"tool_choice": {"type": "function", "name": "g"}},
              {"type": "object", "properties": {}})]
    base = {"input": "hi", "max_output_tokens": 40, "tools": RESP_TOOLS}
    async with make_server(max_model_len=1024, num_device_blocks=80) as srv, \
            aiohttp.ClientSession() as s:
        for extra, schema in cases:
            async with s.post(srv.v1 + "/responses", json={**base, **extra}) as r:
                out = await r.json()
                assert r.status == 200, out
            assert out["text"] == tool_calling_response(schema), out["text"]
            async with s.get(srv.v1 + "/responses/" + out["id"]) as r:
                assert (await r.json())["text"] == tool_calling_response(schema)
            async with s.post(srv.v1 + "/responses",
                              json={**base, **extra, "stream": True}) as r:
                events = [json.loads(line[6:]) for line in (await r.text()).splitlines()
                          if line.startswith("data: ")]
            assert {json.dumps(e["response"]["text"]) for e in events if "response" in e} \
                == {json.dumps(tool_calling_response(schema))}
        async with s.post(srv.v1 + "/responses", json={**base, "tool_choice": "none"}) as r:
            assert (await r.json())["text"] is None  # vLLM: the request's, none


TAG = {"structures": [{"begin": "<b>", "schema": {"type": "boolean"}, "end": "</b>"}],
       "triggers": ["<b"]}


async def test_a_structural_tag_beside_a_forcing_choice_holds_the_output(make_server):
    """vLLM's adjust_request leaves a request with a structural tag as it is: the tag holds the
    output, which is read as the forced call (named: all of it is the arguments); the same
    greedy text as the tag gives with tool_choice none. Responses: a 200, its text as sent."""
    so = {"structured_outputs": {"structural_tag": TAG}}
    plain = {**CHAT, **so, "max_tokens": 12, "temperature": 0, "tool_choice": "none"}
    responses = {"input": "hi", "max_output_tokens": 12, "temperature": 0, **so,
                 "tools": [{"type": "function", **TOOLS[0]["function"]}],
                 "tool_choice": {"type": "function", "name": "f"}}
    async with make_server(max_model_len=1024, num_device_blocks=80) as srv, \
            aiohttp.ClientSession() as s:
        url = srv.v1 + "/chat/completions"
        async with s.post(url, json=plain) as r:
            text = (await r.json())["choices"][0]["message"]["content"]
        async with s.post(url, json={**plain, "tool_choice": NAMED, "guided_regex": "x"}) as r:
            out = await r.json()
            assert r.status == 200, out
            assert r.headers["X-Kvpool-Ignored-Fields"] == "guided_regex"
        message = out["choices"][0]["message"]
        assert message["content"] == "" and text, (message, text)
        assert message["tool_calls"][0]["function"] == {"name": "f", "arguments": text}
        async with s.post(srv.v1 + "/responses", json=responses) as r:
            out = await r.json()
            assert r.status == 200, out
        assert out["text"] is None, out["text"]
        assert [(i["name"], i["arguments"]) for i in out["output"]] == [("f", text)], out
