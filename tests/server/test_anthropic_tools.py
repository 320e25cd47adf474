"""Anthropic tool use through the official ``anthropic`` client on a real ``kvpool serve DIR
--enable-auto-tool-choice --tool-call-parser hermes`` on 127.0.0.1 (a tiny random-weight Qwen2
directory whose template renders tools), as vLLM 0.33 answers it: a forced call (tool_choice
tool / any) is a tool_use block whose input validates against the tool's input_schema and
stop_reason tool_use; streamed, a tool_use block of input_json_delta pieces joining to the
same input; tool_use / tool_result history reaches the template as chat's tool calls and tool
messages; tool_choice none and auto without a call answer text."""

from __future__ import annotations

import json

import aiohttp
import jsonschema
import pytest
from anthropic import AsyncAnthropic

from tests.server.chat_templates import CALLED, as_template_sees, hf_ids
from tests.server.test_tools_http import SCHEMAS, TOOLS, WEATHER
from tests.server.test_tools_http import served  # noqa: F401 - the module's tool-model server

pytest.importorskip("transformers")

MODEL_KW = {"extra_body": {"temperature": 0}}
TOOLS_A = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
           for t in TOOLS]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# CALLED (tests/server/chat_templates.py) as an Anthropic client sends it
HISTORY = [{"role": "user", "content": "Weather in Paris?"},
           {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1",
                                              "name": "get_weather",
                                              "input": {"city": "Paris"}}]},
           {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1",
                                         "content": [{"type": "text", "text": "18 C, clear"}]}]}]


def client(url: str) -> AsyncAnthropic:
    return AsyncAnthropic(base_url=url, api_key="unused", max_retries=0, timeout=120)


async def model_of(url: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(url + "/v1/models") as r:
        return (await r.json())["data"][0]["id"]


def check_uses(msg, names=tuple(SCHEMAS)) -> list:
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert msg.stop_reason == "tool_use" and uses, msg
    for use in uses:
        assert use.id.startswith("chatcmpl-tool-") and use.name in names
        jsonschema.validate(use.input, SCHEMAS[use.name])
    return uses


async def test_a_forced_call_is_a_tool_use_block(served):
    url, _ = served
    model = await model_of(url)
    async with client(url) as c:
        msg = await c.messages.create(model=model, max_tokens=200, messages=ASK, tools=TOOLS_A,
                                      tool_choice={"type": "tool", "name": "get_weather"},
                                      **MODEL_KW)
        assert len(check_uses(msg, ("get_weather",))) == 1
        assert [b.type for b in msg.content] == ["tool_use"]  # the forced call's "" content
        msg = await c.messages.create(model=model, max_tokens=300, messages=ASK, tools=TOOLS_A,
                                      tool_choice={"type": "any",
                                                   "disable_parallel_tool_use": True},
                                      **MODEL_KW)
        assert len(check_uses(msg)) == 1


async def test_a_streamed_call_joins_to_the_same_input(served):
    url, _ = served
    model = await model_of(url)
    kw = dict(model=model, max_tokens=200, messages=ASK, tools=TOOLS_A,
              tool_choice={"type": "tool", "name": "get_weather"}, **MODEL_KW)
    async with client(url) as c:
        whole = await c.messages.create(**kw)
        async with c.messages.stream(**kw) as stream:
            events = [e async for e in stream]
            final = await stream.get_final_message()
    (want,) = check_uses(whole, ("get_weather",))
    (got,) = check_uses(final, ("get_weather",))
    assert (got.name, got.input) == (want.name, want.input)
    starts = [e for e in events if e.type == "content_block_start"]
    assert [s.content_block.type for s in starts] == ["tool_use"]
    assert starts[0].content_block.input == {} and starts[0].content_block.id == got.id
    pieces = [e.delta.partial_json for e in events if e.type == "content_block_delta"]
    assert len(pieces) > 1 and json.loads("".join(pieces)) == want.input
    delta = next(e for e in events if e.type == "message_delta")
    assert delta.delta.stop_reason == "tool_use"


async def test_tool_history_reaches_the_template(served):
    url, d = served
    model = await model_of(url)
    want = hf_ids(d, as_template_sees(CALLED), tools=TOOLS, add_generation_prompt=True)
    async with client(url) as c:
        kw = dict(model=model, system="You are terse.", messages=HISTORY, tools=TOOLS_A)
        counted = await c.messages.count_tokens(**kw)
        msg = await c.messages.create(max_tokens=4, tool_choice={"type": "none"}, **kw,
                                      **MODEL_KW)
    assert counted.input_tokens == len(want)
    u = msg.usage  # vLLM's split of the prompt: the rest, cache reads, cache writes
    assert u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens == \
        len(want)
    assert [b.type for b in msg.content] == ["text"] and msg.stop_reason != "tool_use"


async def test_auto_without_a_call_answers_text(served):
    url, _ = served
    model = await model_of(url)
    async with client(url) as c:
        msg = await c.messages.create(model=model, max_tokens=8, messages=ASK, tools=TOOLS_A,
                                      **MODEL_KW)
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text
    assert msg.stop_reason in ("max_tokens", "end_turn")


async def test_the_raw_tool_use_events(served):
    url, _ = served
    body = {"model": await model_of(url), "max_tokens": 200, "messages": ASK, "stream": True,
            "tools": [{"name": "get_weather", "input_schema": WEATHER}], "temperature": 0,
            "tool_choice": {"type": "tool", "name": "get_weather"}}
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/messages", json=body) as r:
        datas = [json.loads(line[6:]) async for line in r.content if line.startswith(b"data: ")]
    start = next(d for d in datas if d["type"] == "content_block_start")
    block = start["content_block"]
    assert start["index"] == 0 and set(block) == {"type", "id", "name", "input"}
    assert (block["type"], block["name"], block["input"]) == ("tool_use", "get_weather", {})
    deltas = [d["delta"] for d in datas if d["type"] == "content_block_delta"]
    assert {d["type"] for d in deltas} == {"input_json_delta"}
    jsonschema.validate(json.loads("".join(d["partial_json"] for d in deltas)), WEATHER)
    assert [d["type"] for d in datas[-3:]] == ["content_block_stop", "message_delta",
                                               "message_stop"]
    assert datas[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
