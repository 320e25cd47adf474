"""Function tools in the Responses API through the openai client on a real in-process kvpool
server (built-in tiny model): Responses' flat tools with a named or required tool_choice give
function_call output items whose arguments validate against the schema (the grammar forces
them, as for chat), streamed as the events the SDK accumulates; a function_call_output sent
back (inline, or after previous_response_id) reaches the prompt as chat's tool message; hosted
tools and bad tools are 400s naming the param."""

from __future__ import annotations

import json

import aiohttp
import jsonschema
import openai
import pytest

from kvpool.server.tools.request import AUTO_NEEDS_FLAGS

from tests.server.helpers import openai_client as client

ZONE = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET", "PST"]},
                                         "dst": {"type": "boolean"}},
        "required": ["zone", "dst"], "additionalProperties": False}
FLAG = {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"],
        "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_time", "description": "Time in a zone",
          "parameters": ZONE, "strict": True},
         {"type": "function", "name": "set_flag", "parameters": FLAG}]
SCHEMAS = {"get_time": ZONE, "set_flag": FLAG}
NAMED = {"type": "function", "name": "get_time"}
ASK = "What time is it in Berlin?"


@pytest.fixture
async def tsrv(make_server):
    """A 1,024-token context: the built-in template's tool list is about 500 tokens."""
    async with make_server(max_model_len=1024, num_device_blocks=96) as s:
        yield s


def chat_tools() -> list[dict]:
    return [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}
            for t in TOOLS]


async def chat_prompt_tokens(srv, messages: list[dict]) -> int:
    """What /tokenize counts for the chat messages (chat's prompt, tools rendered)."""
    async with aiohttp.ClientSession() as s:
        body = {"messages": messages, "tools": chat_tools()}
        async with s.post(srv.url + "/tokenize", json=body) as r:
            assert r.status == 200, await r.text()
            return (await r.json())["count"]


def check_call(item, names=tuple(SCHEMAS)):
    assert item.type == "function_call" and item.name in names and item.status == "completed"
    assert item.id.startswith("fc_") and item.call_id.startswith("call_")
    jsonschema.validate(json.loads(item.arguments), SCHEMAS[item.name])


async def test_named_and_required_choices_give_function_call_items(tsrv):
    srv = tsrv
    async with client(srv) as c:
        model = srv.engine.model_name
        r = await c.responses.create(model=model, input=ASK, tools=TOOLS, tool_choice=NAMED,
                                     max_output_tokens=40, temperature=1.0,
                                     extra_body={"seed": 3})
        assert len(r.output) == 1 and r.status == "completed"
        check_call(r.output[0], ("get_time",))
        assert r.tool_choice.name == "get_time" and [t.name for t in r.tools] == \
            ["get_time", "set_flag"] and r.output_text == ""
        one = await c.responses.create(model=model, input=ASK, tools=TOOLS,
                                       tool_choice="required", parallel_tool_calls=False,
                                       max_output_tokens=60, temperature=1.0,
                                       extra_body={"seed": 5})
        assert len(one.output) == 1 and one.parallel_tool_calls is False
        check_call(one.output[0])
        assert (await c.responses.retrieve(one.id)).output[0].arguments == \
            one.output[0].arguments


async def test_a_streamed_call_is_the_events_the_sdk_accumulates(tsrv):
    srv = tsrv
    async with client(srv) as c:
        kw = dict(model=srv.engine.model_name, input=ASK, tools=TOOLS, tool_choice="required",
                  max_output_tokens=60, temperature=1.0, extra_body={"seed": 7})
        events = [e async for e in await c.responses.create(stream=True, **kw)]
        async with c.responses.stream(**kw) as stream:
            final = await stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress",
                         "response.output_item.added"]
    assert kinds[-3:] == ["response.function_call_arguments.done",
                          "response.output_item.done", "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = events[-1].response
    assert done.output and all(item.type == "function_call" for item in done.output)
    for k, item in enumerate(done.output):
        check_call(item)
        pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"
                  and e.output_index == k]
        assert "".join(pieces) == item.arguments
        added = [e.item for e in events if e.type == "response.output_item.added"
                 and e.output_index == k]
        assert added[0].id == item.id and added[0].name == item.name
    for item in final.output:  # the SDK's own accumulation of the stream
        check_call(item)


async def test_function_call_output_reaches_the_prompt_inline_and_continued(tsrv):
    srv = tsrv
    async with client(srv) as c:
        model = srv.engine.model_name
        first = await c.responses.create(model=model, input=ASK, tools=TOOLS, tool_choice=NAMED,
                                         max_output_tokens=40, temperature=0)
        call = first.output[0]
        result = {"type": "function_call_output", "call_id": call.call_id, "output": "09:41"}
        turns = [{"role": "user", "content": ASK},
                 {"role": "assistant", "content": "", "tool_calls": [
                     {"id": call.call_id, "type": "function",
                      "function": {"name": call.name, "arguments": call.arguments}}]},
                 {"role": "tool", "tool_call_id": call.call_id, "content": "09:41"}]
        want = await chat_prompt_tokens(srv, turns)
        assert want > await chat_prompt_tokens(srv, turns[:2])  # the result adds tokens
        inline = await c.responses.create(
            model=model, tools=TOOLS, tool_choice="none", max_output_tokens=2,
            input=[{"role": "user", "content": ASK}, call.model_dump(exclude_none=True),
                   result])
        assert inline.usage.input_tokens == want and inline.output[0].type == "message"
        continued = await c.responses.create(model=model, previous_response_id=first.id,
                                             input=[result], tools=TOOLS, tool_choice="none",
                                             max_output_tokens=2)
    assert continued.usage.input_tokens == want


async def test_a_call_cut_by_max_output_tokens_is_incomplete_and_the_follow_up_runs(tsrv):
    """OpenAI's shape for a call max_output_tokens cuts: the response and the item are
    incomplete, the arguments what was generated; a follow-up after it (stored, or the item
    sent back) renders those arguments as {} (chat_messages.py), as vLLM coerces them."""
    srv = tsrv
    async with client(srv) as c:
        model = srv.engine.model_name
        cut = await c.responses.create(model=model, input=ASK, tools=TOOLS, tool_choice=NAMED,
                                       max_output_tokens=4, temperature=0)
        assert cut.status == "incomplete" and cut.incomplete_details.reason == \
            "max_output_tokens"
        call = cut.output[-1]
        assert call.type == "function_call" and call.status == "incomplete"
        with pytest.raises(ValueError):
            json.loads(call.arguments)
        result = {"type": "function_call_output", "call_id": call.call_id, "output": "09:41"}
        kw = dict(model=model, tools=TOOLS, tool_choice="none", max_output_tokens=2)
        continued = await c.responses.create(previous_response_id=cut.id, input=[result], **kw)
        empty = {**call.model_dump(exclude_none=True), "arguments": "{}"}
        inline = await c.responses.create(input=[{"role": "user", "content": ASK}, empty,
                                                 result], **kw)
    assert continued.usage.input_tokens == inline.usage.input_tokens


async def test_a_required_array_cut_short_is_no_item_as_vllm_answers(tsrv):
    """NOTE(cut-required): required, max_output_tokens cuts the forced array: the body has no
    output item (vLLM's answer); it had the JSON text as a message, or the calls whose name
    was read. The stream has the call as far as it went, else nothing (no empty message)."""
    async with client(tsrv) as c:
        for cut, streamed in ((2, []), (32, ["function_call"])):  # before / after a name
            kw = dict(model=tsrv.engine.model_name, input=ASK, tools=TOOLS,
                      tool_choice="required", max_output_tokens=cut, temperature=0)
            r = await c.responses.create(**kw)
            assert r.status == "incomplete" and r.output == [] and r.output_text == "", r
            events = [e async for e in await c.responses.create(stream=True, **kw)]
            done = events[-1].response
            assert done.status == "incomplete" and [i.type for i in done.output] == streamed
            assert all(i.status == "incomplete" for i in done.output) and not [
                e for e in events if e.type.startswith("response.output_text")]
            assert (await c.responses.retrieve(r.id)).output == []


async def test_auto_text_is_one_message_streamed_or_not(make_server):
    async with make_server(max_model_len=1024, num_device_blocks=96,
                           app_options={"tool_call_parser": "hermes"}) as srv, \
            client(srv) as c:
        kw = dict(model=srv.engine.model_name, input=ASK, tools=TOOLS, max_output_tokens=8,
                  temperature=0)
        r = await c.responses.create(**kw)
        events = [e async for e in await c.responses.create(stream=True, **kw)]
    assert r.tool_choice == "auto" and [i.type for i in r.output] == ["message"]
    done = events[-1].response
    assert [e.type for e in events if e.type.startswith("response.output_item")] == \
        ["response.output_item.added", "response.output_item.done"]
    assert done.output_text == r.output_text and done.output[0].type == "message"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") \
        == r.output_text


async def test_auto_without_a_parser_answers_text_as_vllm_responses_does(tsrv):
    """NOTE(auto-text): tools with tool_choice auto or none given (an agent SDK's default) on
    a server without --enable-auto-tool-choice: text, tools in the prompt, auto echoed; chat's
    auto stays vLLM chat's 400."""
    async with client(tsrv) as c:
        kw = dict(model=tsrv.engine.model_name, input=ASK, tools=TOOLS, max_output_tokens=4,
                  temperature=0)
        implied = await c.responses.create(**kw)
        named = await c.responses.create(tool_choice="auto", **kw)
        bare = await c.responses.create(**{k: v for k, v in kw.items() if k != "tools"})
    for r in (implied, named):
        assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
        assert [i.type for i in r.output] == ["message"] and r.output_text
        assert r.tool_choice == "auto" and [t.name for t in r.tools] == ["get_time", "set_flag"]
    assert implied.usage.input_tokens > bare.usage.input_tokens  # the tools are in the prompt
    async with aiohttp.ClientSession() as s:
        body = {"model": tsrv.engine.model_name, "messages": [{"role": "user", "content": ASK}],
                "tools": chat_tools(), "max_tokens": 2}
        async with s.post(tsrv.v1 + "/chat/completions", json=body) as r:
            assert r.status == 400 and (await r.json())["error"]["param"] == "tool_choice"


BAD = [
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"tools": [{"type": "mcp", "server_label": "x"}], "tool_choice": "none"}, "tools[0].type"),
    ({"tools": [{"type": "function"}], "tool_choice": "required"}, "tools[0].name"),
    ({"tools": [TOOLS[0], {"type": "function", "name": "f", "parameters": 3}],
      "tool_choice": "required"}, "tools[1].parameters"),
    ({"tools": {"type": "function"}}, "tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": "maybe"},
     "parallel_tool_calls"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"input": [{"type": "function_call_output", "output": "1"}]}, "input[0].call_id"),
    ({"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]},
     "input[0].name"),
    ({"input": [{"type": "image_generation_call", "result": ""}]}, "input[0].type"),
]


@pytest.mark.parametrize("body, param", BAD)
async def test_bad_tools_are_a_400_naming_the_param(srv, body, param):
    async with client(srv) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.post("/responses", body={"input": ASK, "max_output_tokens": 2, **body},
                         cast_to=object)
        err = info.value.body
        assert err["param"] == param and err["type"] == "invalid_request_error", err
        if body == {"tools": TOOLS}:
            assert err["message"] == AUTO_NEEDS_FLAGS
        await c.responses.create(input="still fine", max_output_tokens=2)
