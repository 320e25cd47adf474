"""The bools of the tools path read as vLLM 0.33's request models read a bool (pydantic's lax
bool, NOTE(lax-bool) in kvpool/server/json_body.py), on a real server on 127.0.0.1: chat's
parallel_tool_calls and a function's strict, response_format's json_schema.strict, and the
Responses API's parallel_tool_calls, store and background. "no", 0, "off" answer as false
does, "yes", 1 as true; another value is a 400 OpenAI error naming the field."""

from __future__ import annotations

import aiohttp

from tests.server.test_forced_tool_constraints import TOOLS
from tests.server.test_lax_bool_fields import same

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 40, "tools": TOOLS,
        "tool_choice": "required", "seed": 1, "temperature": 0}
RESPONSES = {"input": "hi", "max_output_tokens": 40, "tool_choice": "required",
             "tools": [{"type": "function", **TOOLS[0]["function"]}]}
FORMAT = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"enum": ["no"]}}}
SPELLINGS = {False: ["no", 0, "off", "F"], True: ["yes", 1, "on", "t"]}


async def post(s: aiohttp.ClientSession, url: str, body: dict) -> tuple[int, dict]:
    async with s.post(url, json=body) as r:
        return r.status, await r.json()


def strict(tools: list, value: object) -> list:
    return [{**t, "function": {**t["function"], "strict": value}} for t in tools]


async def test_chat_reads_the_tool_bools_as_vllm_does(make_server):
    async with make_server(max_model_len=1024, num_device_blocks=80) as srv, \
            aiohttp.ClientSession() as s:
        url = srv.v1 + "/chat/completions"
        for value, spellings in SPELLINGS.items():
            status, want = await post(s, url, {**CHAT, "parallel_tool_calls": value,
                                               "tools": strict(TOOLS, value)})
            assert status == 200, want
            for other in spellings:
                status, got = await post(s, url, {**CHAT, "parallel_tool_calls": other,
                                                  "tools": strict(TOOLS, other)})
                assert status == 200 and same(got) == same(want), (other, got)
            fmt = {**FORMAT, "json_schema": {**FORMAT["json_schema"], "strict": spellings[0]}}
            status, got = await post(s, url, {**CHAT, "tools": None, "tool_choice": None,
                                              "response_format": fmt})
            assert status == 200, got
        for field, body, param in (
                ("parallel_tool_calls", {**CHAT, "parallel_tool_calls": "maybe"}, None),
                ("strict", {**CHAT, "tools": strict(TOOLS, 2)}, "tools[0].function.strict"),
                ("strict", {**CHAT, "tools": None, "tool_choice": None, "response_format": {
                    **FORMAT, "json_schema": {**FORMAT["json_schema"], "strict": "sure"}}},
                 "response_format")):
            status, got = await post(s, url, body)
            assert status == 400 and set(got["error"]) == {"message", "type", "param", "code"}
            assert got["error"]["param"] == (param or field), got


async def test_responses_reads_the_tool_bools_as_vllm_does(make_server):
    async with make_server(max_model_len=1024, num_device_blocks=80) as srv, \
            aiohttp.ClientSession() as s:
        url = srv.v1 + "/responses"
        for value, spellings in SPELLINGS.items():
            for other in spellings[:2]:
                tools = [{**RESPONSES["tools"][0], "strict": other}]
                status, got = await post(s, url, {**RESPONSES, "parallel_tool_calls": other,
                                                  "store": other, "tools": tools})
                assert status == 200, got
                assert got["parallel_tool_calls"] is value, got
                assert got["tools"][0]["strict"] is value, got  # echoed as vLLM parsed it
                schema = got["text"]["format"]["schema"]  # NOTE(forced-text)
                assert ("maxItems" in schema) is not value, schema
                async with s.get(f"{url}/{got['id']}") as r:  # stored only when true
                    assert r.status == (200 if value else 404), (other, await r.text())
        status, got = await post(s, url, {**RESPONSES, "background": "yes", "store": "no"})
        assert status == 400 and got["error"]["param"] == "background", got
        for field in ("parallel_tool_calls", "store", "background"):
            status, got = await post(s, url, {**RESPONSES, field: "maybe"})
            assert status == 400 and got["error"]["param"] == field, got
