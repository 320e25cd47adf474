"""Request shapes real clients send (copied from the wire, the client packages are not
needed): the OpenAI Agents SDK, LiteLLM and LangChain against a real server on 127.0.0.1.

- An agent loop sends the model's own tool call back in the next turn, arguments as they
  came; a call that ``max_tokens`` cut short has arguments that are not JSON. vLLM coerces
  them (and arguments that are JSON but not an object) to ``{}`` so the conversation can go
  on; a 400 here failed every later turn of that conversation.
- The Agents SDK's ``ModelSettings(truncation="auto")`` on the Responses model sends
  ``truncation: "auto"``, which vLLM takes as ``truncate_prompt_tokens=-1`` and echoes.
"""

from __future__ import annotations

import json

import aiohttp
import pytest

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get weather.", "strict": True,
    "parameters": {"properties": {"city": {"title": "City", "type": "string"}},
                   "required": ["city"], "title": "get_weather_args", "type": "object",
                   "additionalProperties": False}}}]
CALL_ID = "chatcmpl-tool-218d4eb9b95e4147a584de0ed70551b8"


def agent_turn(arguments: str) -> list[dict]:
    """The Agents SDK's second chat turn (OpenAIChatCompletionsModel), as it went out."""
    return [{"content": "use tool", "role": "system"},
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": CALL_ID, "type": "function",
                 "function": {"name": "get_weather", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": CALL_ID, "content": "sunny"}]


@pytest.fixture
async def tools_srv(make_server):
    """A 1024-token context (the tools in the prompt) and ``--enable-auto-tool-choice
    --tool-call-parser hermes``."""
    async with make_server(max_model_len=1024, num_device_blocks=96,
                           app_options={"tool_call_parser": "hermes"}) as s:
        yield s


async def post(url: str, body: dict) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        return r.status, await r.json()


@pytest.mark.parametrize("arguments", ['{"c', '{"city":"Par', "[1, 2]", "42", "[" * 5000],
                         ids=["cut", "cut-string", "list", "number", "deep"])
async def test_a_tool_call_whose_arguments_are_not_an_object_is_taken_as_empty(tools_srv,
                                                                               arguments):
    srv = tools_srv
    status, out = await post(srv.v1 + "/chat/completions", {
        "model": "kvpool-tiny", "messages": agent_turn(arguments), "max_tokens": 2,
        "tools": TOOLS})
    assert status == 200, out
    assert out["choices"][0]["finish_reason"] == "length"
    # the template saw {} for them: the prompt is the one of a call with empty arguments
    status, empty = await post(srv.v1 + "/chat/completions", {
        "model": "kvpool-tiny", "messages": agent_turn("{}"), "max_tokens": 2,
        "tools": TOOLS})
    assert status == 200, empty
    assert out["usage"]["prompt_tokens"] == empty["usage"]["prompt_tokens"]


async def test_a_responses_function_call_item_cut_short_continues(tools_srv):
    """The Agents SDK's Responses turn after a call that max_output_tokens cut short."""
    srv = tools_srv
    body = {"model": "kvpool-tiny", "instructions": "use tool", "max_output_tokens": 2,
            "tools": [{"type": "function", "name": "get_weather", "strict": True,
                       "parameters": TOOLS[0]["function"]["parameters"]}],
            "input": [{"content": "weather?", "role": "user"},
                      {"arguments": '{"city":"Par', "call_id": "call_1",
                       "name": "get_weather", "type": "function_call", "id": "fc_1",
                       "status": "incomplete"},
                      {"call_id": "call_1", "output": "sunny",
                       "type": "function_call_output"}]}
    status, out = await post(srv.v1 + "/responses", body)
    assert status == 200, out
    assert out["status"] == "incomplete" and out["usage"]["output_tokens"] == 2


@pytest.mark.parametrize("truncation", ["auto", "disabled"])
async def test_responses_truncation_is_taken_and_echoed(srv, truncation):
    body = {"model": "kvpool-tiny", "input": "hi", "max_output_tokens": 2,
            "truncation": truncation, "metadata": {"k": "v"}, "store": True}
    status, out = await post(srv.v1 + "/responses", body)
    assert status == 200, out
    assert out["truncation"] == truncation


@pytest.mark.parametrize("value", ["sometimes", 1, ["auto"]])
async def test_responses_truncation_other_values_are_400s(srv, value):
    status, out = await post(srv.v1 + "/responses", {
        "model": "kvpool-tiny", "input": "hi", "max_output_tokens": 2, "truncation": value})
    assert status == 400, out
    assert out["error"]["param"] == "truncation", json.dumps(out)


# a request template showing the two variables vLLM sets from reasoning_effort
SHOW = ("{% for m in messages %}{{ m.content }}|{% endfor %}"
        "{{ reasoning_effort | default('unset') }}|{{ enable_thinking | default('unset') }}")


@pytest.mark.parametrize("extra, shown", [
    ({}, "unset|unset"),
    ({"reasoning_effort": "low"}, "low|True"),
    ({"reasoning_effort": "none"}, "none|False"),
    ({"reasoning_effort": None}, "unset|unset"),
    ({"reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": False}},
     "high|False"),
    ({"reasoning_effort": "max", "chat_template_kwargs": {"reasoning_effort": "low"}},
     "max|True"),
], ids=["absent", "low", "none", "null", "kwargs-thinking", "kwargs-effort"])
async def test_chat_reasoning_effort_reaches_the_template(make_server, extra, shown):
    """LangChain's ``ChatOpenAI(reasoning_effort=...)`` / LiteLLM's ``reasoning_effort``: vLLM
    renders it as the template's ``reasoning_effort`` and ``enable_thinking`` (Qwen3's switch)."""
    async with make_server(app_options={"trust_request_chat_template": True}) as srv:
        status, out = await post(srv.v1 + "/chat/completions", {
            "model": srv.engine.model_name, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 1, "prompt_logprobs": 0, "chat_template": SHOW, **extra})
        want = srv.engine.tokenizer.encode("hi|" + shown, add_special_tokens=False)
    assert status == 200, out
    # the prompt's ids, from vLLM's prompt_logprobs (the first token has none)
    got = [int(k) for entry in out["prompt_logprobs"][1:] for k in entry]
    assert out["usage"]["prompt_tokens"] == len(want) and got == want[1:], shown


@pytest.mark.parametrize("value", ["extreme", 3])
async def test_chat_reasoning_effort_other_values_are_400s(srv, value):
    status, out = await post(srv.v1 + "/chat/completions", {
        "model": srv.engine.model_name, "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 1, "reasoning_effort": value})
    assert status == 400 and out["error"]["param"] == "reasoning_effort", out


async def test_responses_reasoning_is_taken(srv):
    """The Agents SDK's ``ModelSettings(reasoning=Reasoning(effort="low"))`` and LangChain's
    ``reasoning=`` send ``reasoning``; vLLM passes its effort to the template."""
    body = {"model": "kvpool-tiny", "input": "hi", "max_output_tokens": 2}
    for reasoning in ({"effort": "low", "summary": "auto"}, {"effort": None}, {}):
        status, out = await post(srv.v1 + "/responses", {**body, "reasoning": reasoning})
        assert status == 200, out
    status, out = await post(srv.v1 + "/responses", {**body, "reasoning": {"effort": "x"}})
    assert status == 400 and out["error"]["param"] == "reasoning.effort", out


@pytest.mark.parametrize("field, bad", [
    ("presence_penalty", 5), ("frequency_penalty", -3), ("repetition_penalty", 0),
    ("min_p", 2), ("logit_bias", {"x": 1}), ("stop_token_ids", "7"),
    ("skip_special_tokens", "maybe"), ("include_stop_str_in_output", 3),
    ("chat_template_kwargs", {"messages": []})])
async def test_responses_sampling_fields_are_read(srv, field, bad):
    """vLLM's Responses request carries chat's sampling fields (the Agents SDK's
    ModelSettings.frequency_penalty / presence_penalty, LangChain's on use_responses_api);
    they were ignored as unknown. A value chat refuses shows that they are read."""
    status, out = await post(srv.v1 + "/responses", {
        "model": "kvpool-tiny", "input": "hi", "max_output_tokens": 2, field: bad})
    assert status == 400 and out["error"]["param"] == field, out


async def test_responses_logit_bias_and_stop_token_ids_shape_the_output(srv):
    tid = srv.engine.tokenizer.encode("a", add_special_tokens=False)[-1]
    body = {"model": "kvpool-tiny", "input": "hi", "max_output_tokens": 4,
            "logit_bias": {str(tid): 100}, "presence_penalty": 0.5, "min_p": 0.1,
            "frequency_penalty": 0.5, "repetition_penalty": 1.1}
    status, out = await post(srv.v1 + "/responses", body)
    assert status == 200, out
    assert out["output"][0]["content"][0]["text"] == srv.engine.tokenizer.decode([tid] * 4)
    status, out = await post(srv.v1 + "/responses", {**body, "stop_token_ids": [tid]})
    assert status == 200 and out["status"] == "completed", out
    assert out["usage"]["output_tokens"] == 1


ORDERED = {"type": "object", "additionalProperties": False, "required": ["zeta", "alpha", "mid"],
           "properties": {"zeta": {"enum": [1]}, "alpha": {"enum": [3]},
                          "mid": {"type": "object", "additionalProperties": False,
                                  "required": ["y", "b"],
                                  "properties": {"y": {"enum": [5]}, "b": {"enum": [6]}}}}}


async def test_structured_output_keeps_the_schemas_property_order(srv):
    """vLLM generates an object's properties in the order its schema lists them (what
    LangChain's with_structured_output / the Agents SDK's output_type rely on to have a
    ``reasoning`` field written before ``answer``), not sorted by name."""
    want = '{"zeta":1,"alpha":3,"mid":{"y":5,"b":6}}'
    for fmt in ({"type": "json_schema", "json_schema": {"name": "o", "schema": ORDERED}},):
        status, out = await post(srv.v1 + "/chat/completions", {
            "model": "kvpool-tiny", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 40, "response_format": fmt})
        assert status == 200 and out["choices"][0]["message"]["content"] == want, out
    status, out = await post(srv.v1 + "/completions", {
        "model": "kvpool-tiny", "prompt": "hi", "max_tokens": 40, "guided_json": ORDERED})
    assert status == 200 and out["choices"][0]["text"] == want, out
