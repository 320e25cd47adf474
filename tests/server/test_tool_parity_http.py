"""Tool requests vLLM serves, through real in-process servers (the built-in tiny model) on
chat, /v1/messages and /v1/responses: a tool named "github/create_issue" end to end through
the hermes parser and the template; lists of 150 tools and a forced union over 100 realistic
tools (tools/request.py NOTE(tool-list), grammar.py NOTE(schema-cap)); a zero-argument tool's
forced call is ``{}`` (NOTE(closed-tools)); a tool schema 61 objects deep, parsed, rendered,
compiled and generated under (json_body.py NOTE(json-depth))."""

from __future__ import annotations

import json

import aiohttp
import pytest

from tests.server.helpers import post_ok, sse_chunks
from tests.server.test_tool_schema_parity import github_tool

NAME = "github/create_issue"
ISSUE = {"type": "object", "properties": {"title": {"enum": ["a", "b"]}},
         "required": ["title"]}
# auto: a regex makes the random model write a hermes call of that name after some text
CALL_REGEX = ('Filing\\.<tool_call>\\{"name": "github/create_issue", "arguments": '
              '\\{"title": "(a|b)"\\}\\}</tool_call>')
ASK = [{"role": "user", "content": "File an issue."}]
PLAIN = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
         "<|assistant|>\n")  # a template that leaves the tools out: long lists fit


@pytest.fixture
async def hermes_srv(make_server):
    """A 1,024-token context (the built-in template lists the tools) and hermes auto."""
    async with make_server(max_model_len=1024, num_device_blocks=96,
                           app_options={"tool_call_parser": "hermes"}) as s:
        yield s


def joined(chunks: list[dict]) -> tuple[str, list[tuple[str, str]]]:
    """A stream's content and its calls' (name, arguments)."""
    content, calls = "", []
    for chunk in chunks:
        delta = chunk["choices"][0]["delta"] if chunk["choices"] else {}
        content += delta.get("content") or ""
        for tc in delta.get("tool_calls") or []:
            if tc.get("id"):
                calls.append([tc["function"]["name"], ""])
            calls[tc["index"]][1] += tc["function"].get("arguments") or ""
    return content, [tuple(c) for c in calls]


async def test_a_slashed_name_goes_through_hermes_and_the_template(hermes_srv):
    url = hermes_srv.v1 + "/chat/completions"
    tools = [{"type": "function", "function": {"name": NAME, "parameters": ISSUE}}]
    body = {"messages": ASK, "tools": tools, "max_tokens": 120, "temperature": 0,
            "structured_outputs": {"regex": CALL_REGEX}}
    msg = (await post_ok(url, body))["choices"][0]["message"]
    (call,) = msg["tool_calls"]
    assert msg["content"] == "Filing." and call["function"]["name"] == NAME
    assert json.loads(call["function"]["arguments"])["title"] in ("a", "b")
    assert joined(await sse_chunks(url, {**body, "stream": True})) == (
        "Filing.", [(NAME, call["function"]["arguments"])])
    forced = await post_ok(url, {"messages": ASK, "tools": tools, "max_tokens": 60,
                                 "tool_choice": "required", "parallel_tool_calls": False})
    assert [c["function"]["name"] for c in forced["choices"][0]["message"]["tool_calls"]] \
        == [NAME]
    turn = ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": call["id"], "content": "#7 filed"}]
    again = await post_ok(url, {"messages": turn, "tools": tools, "max_tokens": 2,
                                "tool_choice": "none"})
    assert again["usage"]["prompt_tokens"] > forced["usage"]["prompt_tokens"]


async def post(url: str, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body, headers=headers) as r:
        return r.status, await r.json()


async def test_long_tool_lists_and_a_forced_union_over_100_tools(make_server):
    """150 namespaced tools on every route; "required" / any over 100 realistic tools (an
    82 KB union: a 400 under the old 64 KiB cap)."""
    async with make_server(max_body_bytes=1 << 20, max_model_len=1024, num_device_blocks=96,
                           app_options={"chat_template": PLAIN}) as srv:
        many = [{"type": "function", "function": {"name": f"mcp__srv{i % 9}__tool_{i}",
                                                  "parameters": {"type": "object"}}}
                for i in range(150)]
        big = [github_tool(i) for i in range(100)]
        chat = {"messages": ASK, "max_tokens": 4}
        for tools, choice in ((many, "none"), (big, "required")):
            status, out = await post(srv.v1 + "/chat/completions",
                                     {**chat, "tools": tools, "tool_choice": choice})
            assert status == 200, out
        anthropic = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
                     for t in big]
        status, out = await post(srv.url + "/v1/messages", {
            "model": srv.engine.model_name, "max_tokens": 4, "messages": ASK,
            "tools": anthropic, "tool_choice": {"type": "any"}})
        assert status == 200, out
        flat = [{"type": "function", **t["function"]} for t in many]
        status, out = await post(srv.v1 + "/responses", {
            "input": "hi", "tools": flat, "tool_choice": "none", "max_output_tokens": 4})
        assert status == 200 and len(out["tools"]) == 150, out


@pytest.mark.parametrize("params", [None, {}], ids=["none", "empty"])
async def test_a_zero_argument_tool_is_called_with_an_empty_object(hermes_srv, params):
    """vLLM's answer: ``{}`` (it was an open object, or no call at max_tokens)."""
    fn = {"name": "list_files"} | ({} if params is None else {"parameters": params})
    chat = {"messages": ASK, "tools": [{"type": "function", "function": fn}],
            "max_tokens": 60, "temperature": 1.0, "parallel_tool_calls": False}
    for choice, finish in (("required", "tool_calls"),
                           ({"type": "function", "function": {"name": "list_files"}}, "stop")):
        out = (await post_ok(hermes_srv.v1 + "/chat/completions",
                             {**chat, "tool_choice": choice}))["choices"][0]
        assert out["finish_reason"] == finish, out
        assert [c["function"]["arguments"] for c in out["message"]["tool_calls"]] == ["{}"]
    r = await post_ok(hermes_srv.v1 + "/responses", {
        "input": "hi", "tools": [{"type": "function", **fn}], "tool_choice": "required",
        "parallel_tool_calls": False, "max_output_tokens": 60, "temperature": 1.0})
    assert r["status"] == "completed" and [(i["name"], i["arguments"]) for i in r["output"]
                                           ] == [("list_files", "{}")], r
    status, msg = await post(hermes_srv.url + "/v1/messages", {
        "model": hermes_srv.engine.model_name, "max_tokens": 60, "messages": ASK,
        "tools": [{"name": "list_files", "input_schema": params or {}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True}})
    assert status == 200 and msg["stop_reason"] == "tool_use", msg
    assert [b["input"] for b in msg["content"] if b["type"] == "tool_use"] == [{}]


def nested(levels: int) -> dict:
    schema: dict = {"enum": ["a", "b"]}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


async def test_a_schema_61_objects_deep_is_parsed_and_rendered_but_not_compiled(make_server):
    """NOTE(json-depth): 128 levels of body; one more is still the 400. A 4,096-token
    context: the built-in template renders the schema (~2,400 tokens). NOTE(schema-nesting):
    as in vLLM 0.33, a schema compiled for output may nest 64 levels of objects and arrays
    (31 objects here; 29 inside required's array of calls), past that a 400."""
    async with make_server(max_model_len=4096, num_device_blocks=400) as srv:
        await deep_requests(srv)


async def deep_requests(srv) -> None:
    url = srv.v1 + "/chat/completions"
    tool = {"type": "function", "function": {"name": "deep", "parameters": nested(61)}}
    body = {"messages": ASK, "tools": [tool], "max_tokens": 40}
    assert depth(body) == 128
    status, out = await post(url, {**body, "tool_choice": "none"})
    assert status == 200, out
    named = {"type": "function", "function": {"name": "deep"}}
    for levels, choice, param in ((61, named, "tools[0].function.parameters"),
                                  (61, "required", "tools[0].function.parameters"),
                                  (30, "required", "tools")):  # past 64 in the calls' array
        tools = [{"type": "function", "function": {"name": "deep", "parameters": nested(levels)}}]
        status, out = await post(url, {**body, "tools": tools, "tool_choice": choice})
        assert status == 400 and out["error"]["param"] == param, (choice, out)
        assert "nested too deeply" in out["error"]["message"], out
    for levels, choice in ((31, named), (29, "required")):
        tools = [{"type": "function", "function": {"name": "deep", "parameters": nested(levels)}}]
        status, out = await post(url, {**body, "tools": tools, "tool_choice": choice})
        assert status == 200, (levels, out)
    for levels, want in ((61, 400), (31, 200)):
        fmt = {"type": "json_schema", "json_schema": {"name": "d", "schema": nested(levels)}}
        status, out = await post(url, {"messages": ASK, "max_tokens": 40, "response_format": fmt})
        assert status == want, (levels, out)
    status, out = await post(srv.url + "/v1/messages", {
        "model": srv.engine.model_name, "max_tokens": 20, "messages": ASK,
        "tools": [{"name": "deep", "input_schema": nested(31)}],
        "tool_choice": {"type": "tool", "name": "deep"}})
    assert status == 200, out
    too_deep = {**body, "tools": [{**tool, "function": {"name": "deep",
                                                          "parameters": nested(62)}}]}
    status, out = await post(url, too_deep)
    assert status == 400 and out["error"]["param"] is None, out
    assert out["error"]["message"] == "request body is nested deeper than 128"
