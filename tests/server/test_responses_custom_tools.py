"""Responses ``custom`` (free-form, Codex's apply_patch) and ``namespace`` tools through the
openai client on a real in-process kvpool server (built-in tiny model, hermes tool parser):
shown to the model as the function tools vLLM 0.33 shows (the prompt /tokenize counts for
chat's messages with those tools), a named custom choice gives a ``custom_tool_call`` item
(streamed as custom_tool_call_input deltas), a namespaced call a ``function_call`` with its
``namespace``, and each sent back (inline or after previous_response_id) is chat's tool call
and tool message; what vLLM refuses stays a 400."""

from __future__ import annotations

import json

import aiohttp
import openai
import pytest

from kvpool.server.responses_custom import PARAMETERS

from tests.server.helpers import openai_client as client

CUSTOM = {"type": "custom", "name": "apply_patch", "description": "Apply a patch"}
FLAG = {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"],
        "additionalProperties": False}
FN = {"type": "function", "name": "set_flag", "parameters": FLAG, "strict": False}
FN_CHAT = {"name": "set_flag", "parameters": FLAG}
NS = {"type": "namespace", "name": "ns", "description": "Flags", "tools": [FN]}
SHIM = {"type": "function", "function": {"name": "apply_patch", "description": "Apply a patch",
                                         "parameters": PARAMETERS}}
FLAT = {"type": "function", "function": {"name": "ns__set_flag", "parameters": FLAG,
                                         "strict": False}}
PICK = {"type": "custom", "name": "apply_patch"}
ASK = "Patch it"


@pytest.fixture
async def hsrv(make_server):
    """A 1,024-token context (the built-in template's tool list), the hermes parser."""
    async with make_server(max_model_len=1024, num_device_blocks=96,
                           app_options={"tool_call_parser": "hermes"}) as s:
        yield s


async def chat_tokens(srv, messages: list[dict], tools: list[dict]) -> int:
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.url + "/tokenize",
                          json={"messages": messages, "tools": tools}) as r:
            assert r.status == 200, await r.text()
            return (await r.json())["count"]


async def test_custom_and_namespace_tools_are_shown_as_vllms_function_tools(hsrv):
    """The probe's requests: 200, the tools in the prompt as vLLM's shim and flat names, and
    echoed as the openai package's CustomTool / NamespaceTool dump them."""
    user = [{"role": "user", "content": ASK}]
    async with client(hsrv) as c:
        kw = dict(model=hsrv.engine.model_name, input=ASK, max_output_tokens=2)
        both = await c.responses.create(tools=[CUSTOM, NS], tool_choice="none", **kw)
        required = await c.responses.create(tools=[FN, CUSTOM], tool_choice="required", **kw)
    assert both.usage.input_tokens == await chat_tokens(hsrv, user, [SHIM, FLAT])
    assert required.status == "incomplete"
    assert both.tools[0].model_dump(exclude_none=True) == CUSTOM
    assert both.tools[0].format is None and both.tools[1].tools[0].name == "set_flag"


async def test_a_custom_call_is_a_custom_tool_call_item_and_goes_back_as_chats(hsrv):
    """vLLM's output item for a call of the shim: custom_tool_call, its input the decoded
    payload; sent back with its output, the prompt is chat's call {"input": ...} and tool
    message, inline and after previous_response_id."""
    async with client(hsrv) as c:
        kw = dict(model=hsrv.engine.model_name, input=ASK, tools=[CUSTOM], tool_choice=PICK,
                  max_output_tokens=48, temperature=1.0, extra_body={"seed": 0})
        first = await c.responses.create(**kw)
        assert first.status == "completed" and first.tool_choice.type == "custom"
        call = first.output[0]
        assert (call.type, call.name, call.id[:4]) == ("custom_tool_call", "apply_patch", "ctc_")
        assert call.input and not call.input.startswith("{")
        result = {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "done"}
        more = dict(model=kw["model"], tools=[CUSTOM], max_output_tokens=2)
        inline = await c.responses.create(input=[{"role": "user", "content": ASK},
                                                 call.model_dump(exclude_none=True), result],
                                          **more)
        continued = await c.responses.create(previous_response_id=first.id, input=[result],
                                             **more)
    turns = [{"role": "user", "content": ASK},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"id": call.call_id, "type": "function", "function": {
                     "name": "apply_patch",
                     "arguments": json.dumps({"input": call.input}, ensure_ascii=False)}}]},
             {"role": "tool", "tool_call_id": call.call_id, "content": "done"}]
    want = await chat_tokens(hsrv, turns, [SHIM])
    assert inline.usage.input_tokens == continued.usage.input_tokens == want
    assert inline.output[0].type == "message"


async def test_a_streamed_custom_call_is_vllms_input_events(hsrv):
    async with client(hsrv) as c:
        kw = dict(model=hsrv.engine.model_name, input=ASK, tools=[CUSTOM], tool_choice=PICK,
                  max_output_tokens=48, temperature=1.0, extra_body={"seed": 729})
        body = await c.responses.create(**kw)
        events = [e async for e in await c.responses.create(stream=True, **kw)]
    assert "\n" in body.output[0].input  # an escape the prefix decoder waited out
    kinds = [e.type for e in events]
    assert kinds[2] == "response.output_item.added" and events[2].item.input == ""
    assert kinds[-3:] == ["response.custom_tool_call_input.done", "response.output_item.done",
                          "response.completed"]
    deltas = "".join(e.delta for e in events if e.type.endswith("call_input.delta"))
    assert deltas == events[-3].input == events[-2].item.input == body.output[0].input
    assert events[-1].response.output[0].id == events[2].item.id


async def test_a_namespaced_call_names_its_namespace_and_goes_back_flat(hsrv):
    """A choice by the local name resolves to ``ns__set_flag`` (echoed so, as vLLM rewrites
    it); the call is a function_call named set_flag with namespace ns; sent back, it is the
    flat name's call."""
    async with client(hsrv) as c:
        kw = dict(model=hsrv.engine.model_name, tools=[NS], max_output_tokens=24)
        first = await c.responses.create(input=ASK, temperature=0, **kw, tool_choice={
            "type": "function", "name": "set_flag"})
        call = first.output[0]
        assert (call.type, call.name, call.namespace) == ("function_call", "set_flag", "ns")
        assert first.tool_choice.name == "ns__set_flag" and json.loads(call.arguments)
        result = {"type": "function_call_output", "call_id": call.call_id, "output": "ok"}
        back = await c.responses.create(input=[{"role": "user", "content": ASK},
                                               call.model_dump(exclude_none=True), result], **kw)
    turns = [{"role": "user", "content": ASK},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"id": call.call_id, "type": "function", "function": {
                     "name": "ns__set_flag", "arguments": call.arguments}}]},
             {"role": "tool", "tool_call_id": call.call_id, "content": "ok"}]
    assert back.usage.input_tokens == await chat_tokens(hsrv, turns, [FLAT])


async def test_a_lone_surrogate_input_goes_back_inline_as_after_previous_response_id(hsrv):
    """NOTE(lone-input): the model's payload ``x\\ud83dy`` (an unpaired escape) is no text:
    the item's input is the escape as the model wrote it, streamed or not, and sent back
    inline it is a 200, as after previous_response_id (it was the body's lone-surrogate 400)."""
    said = r"x\ud83dy"
    text = '<tool_call>\n{"name": "apply_patch", "arguments": {"input": "' + said + '"}}\n' \
        '</tool_call>'
    body = {"model": hsrv.engine.model_name, "input": ASK, "tools": [CUSTOM],
            "max_output_tokens": 64, "structured_outputs": {"choice": [text]}}
    async with aiohttp.ClientSession() as s:
        async with s.post(hsrv.v1 + "/responses", json=body) as r:
            call = (await r.json())["output"][0]
        async with s.post(hsrv.v1 + "/responses", json={**body, "stream": True}) as r:
            events = [json.loads(line[6:]) for line in (await r.text()).splitlines()
                      if line.startswith("data: ")]
        result = {"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "ok"}
        async with s.post(hsrv.v1 + "/responses", json={
                "model": body["model"], "tools": [CUSTOM], "max_output_tokens": 2,
                "input": [{"role": "user", "content": ASK}, call, result]}) as r:
            assert r.status == 200, await r.text()
    assert (call["type"], call["input"]) == ("custom_tool_call", said)
    deltas = "".join(e["delta"] for e in events if e["type"].endswith("call_input.delta"))
    assert deltas == events[-2]["item"]["input"] == said


async def test_a_lone_surrogate_in_function_arguments_goes_back_inline(hsrv):
    """NOTE(lone-args): hermes' arguments ``{"on": "x\\ud83dy"}`` (an unpaired escape) keep the
    escape in their JSON text, which reads back as the same value: the Responses item and
    chat's tool call, sent back inline, are a 200 (they were the body's lone-surrogate 400)."""
    text = '<tool_call>\n{"name": "set_flag", "arguments": {"on": "x\\ud83dy"}}\n</tool_call>'
    forced = {"model": hsrv.engine.model_name, "structured_outputs": {"choice": [text]}}
    chat = [{"role": "user", "content": ASK}]
    async with aiohttp.ClientSession() as s:
        async with s.post(hsrv.v1 + "/responses", json={
                "input": ASK, "tools": [FN], "max_output_tokens": 64, **forced}) as r:
            call = (await r.json())["output"][0]
        async with s.post(hsrv.v1 + "/chat/completions", json={
                "messages": chat, "tools": [{"type": "function", "function": FN_CHAT}],
                "max_tokens": 64, **forced}) as r:
            said = (await r.json())["choices"][0]["message"]
        back = [{"role": "user", "content": ASK}, call,
                {"type": "function_call_output", "call_id": call["call_id"], "output": "ok"}]
        async with s.post(hsrv.v1 + "/responses", json={
                "model": forced["model"], "tools": [FN], "max_output_tokens": 2,
                "input": back}) as r:
            assert r.status == 200, await r.text()
        tool = {"role": "tool", "tool_call_id": said["tool_calls"][0]["id"], "content": "ok"}
        async with s.post(hsrv.v1 + "/chat/completions", json={
                "model": forced["model"], "max_tokens": 2,
                "messages": [*chat, said, tool]}) as r:
            assert r.status == 200, await r.text()
    assert json.loads(call["arguments"]) == {"on": "x\ud83dy"}
    assert said["tool_calls"][0]["function"]["arguments"] == call["arguments"]


TWICE = [NS, {**NS, "name": "other"}]
BAD = [
    ({"tools": [{**CUSTOM, "format": {"type": "grammar", "syntax": "lark",
                                      "definition": "start: /a/"}}]}, "tools"),
    ({"tools": TWICE, "tool_choice": {"type": "function", "name": "set_flag"}},
     "tool_choice"),
    ({"tools": [CUSTOM], "tool_choice": {"type": "custom", "name": "nope"}}, "tool_choice"),
    ({"tools": [{"type": "custom"}]}, "tools[0].name"),
    ({"tools": [{"type": "namespace", "name": "ns", "description": "d"}]}, "tools[0].tools"),
    ({"input": [{"type": "custom_tool_call", "name": "apply_patch", "input": "x"}]},
     "input[0].call_id"),
    ({"tools": [{**NS, "tools": [{"type": "function", "parameters": FLAG}]}]},
     "tools[0].tools[0].name"),  # was a 500 (KeyError)
    ({"tools": [{**NS, "tools": [NS]}]}, "tools[0].tools[0].type"),  # these three: a 200,
    ({"tools": [{**NS, "tools": [5]}]}, "tools[0].tools[0]"),  # the tool dropped unsaid
    ({"tools": [{**CUSTOM, "format": "grammar"}]}, "tools[0].format"),
]


@pytest.mark.parametrize("body, param", BAD)
async def test_what_vllm_refuses_stays_a_400_naming_the_param(srv, body, param):
    async with client(srv) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.post("/responses", body={"input": ASK, "max_output_tokens": 2,
                                             "tool_choice": "none", **body}, cast_to=object)
    assert info.value.body["param"] == param, info.value.body
