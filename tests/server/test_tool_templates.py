"""Tools and tool messages through the chat templates: a model's Jinja template gets the
request's ``tools`` and the assistant's calls (arguments as objects) and tool results, to the
same ids as transformers' ``apply_chat_template(messages, tools=tools)``; the built-in
template lists the tools and renders calls the way the hermes parser reads them."""

from __future__ import annotations

import json

import pytest

from kvpool.errors import RequestError
from kvpool.server.builtin_template import ChatTemplate
from kvpool.server.chat_messages import parse_messages
from kvpool.server.protocol import RequestParser
from kvpool.server.tools.parsers import tool_parser
from tests.server.chat_templates import (CALLED, TOOL_CHATML, as_template_sees, hf_ids,
                                         model_dir, parser_for)

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
           "required": ["city"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                           "parameters": WEATHER}}]


def test_model_template_renders_tools_and_tool_messages_as_transformers(tmp_path):
    d = model_dir(tmp_path, TOOL_CHATML, "<|im_start|>", "<|im_end|>")
    p = parser_for(d)
    for messages in (CALLED, CALLED[1:2]):
        got = p.parse_chat({"messages": messages, "tools": TOOLS, "tool_choice": "none",
                            "max_tokens": 4}).prompt_ids
        want = hf_ids(d, as_template_sees(messages), tools=TOOLS, add_generation_prompt=True)
        assert got == want
        text = p.tokenizer.decode(got)
        assert '"name": "get_weather"' in text and "Weather now" in text
    assert "<tool_response>\n18 C, clear" in p.tokenizer.decode(
        p.parse_chat({"messages": CALLED, "tools": TOOLS, "tool_choice": "none"}).prompt_ids)
    # vLLM's /tokenize takes the tools too: the same ids as the chat request renders
    assert p.parse_tokenize({"messages": CALLED, "tools": TOOLS}) == hf_ids(
        d, as_template_sees(CALLED), tools=TOOLS, add_generation_prompt=True)
    # no tools: the template sees tools=None, as transformers renders it
    plain = p.parse_chat({"messages": CALLED[:2], "max_tokens": 4}).prompt_ids
    assert plain == hf_ids(d, CALLED[:2], add_generation_prompt=True)


def test_builtin_template_lists_tools_and_renders_calls_for_hermes():
    text = ChatTemplate().render(parse_messages(CALLED), tools=TOOLS)
    system, rest = text.split("<|end|>\n", 1)
    assert system.startswith("<|system|>\nYou are terse.\n\n# Tools")
    assert json.dumps(TOOLS[0]["function"]) in system and "<tool_call>" in system
    assistant = rest.split("<|assistant|>\n", 1)[1].split("<|end|>")[0]
    got = tool_parser("hermes").extract(assistant)
    assert [(c.name, json.loads(c.arguments)) for c in got.calls] == [
        ("get_weather", {"city": "Paris"})]
    assert "<|tool|>\n18 C, clear\n<|end|>\n<|assistant|>\n" in text
    opened = ChatTemplate().render(parse_messages(CALLED[1:2]), tools=TOOLS)
    assert opened.startswith("<|system|>\n# Tools")  # a system turn is opened for them
    assert ChatTemplate().render(parse_messages(CALLED[1:2])) == \
        "<|user|>\nWeather in Paris?\n<|end|>\n<|assistant|>\n"
    # continue_final_message continues a user's message too (vLLM and transformers do)
    assert ChatTemplate().render(parse_messages(CALLED[1:2]), add_generation_prompt=False,
                                 continue_final_message=True) == "<|user|>\nWeather in Paris?"


@pytest.mark.parametrize("message, param", [
    ({"role": "assistant", "tool_calls": {"id": "x"}}, "messages[0].tool_calls"),
    ({"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]},
     "messages[0].tool_calls[0]"),
    ({"role": "tool", "content": "r", "tool_call_id": 7}, "messages[0].tool_call_id"),
    ({"role": "tool", "content": {"text": "r"}}, "messages[0].content"),
    ({"role": ["function"], "content": "r"}, "messages[0].role"),
    ({"role": "function", "content": "r", "name": 7}, "messages[0].name"),
])
def test_bad_tool_messages_are_400s_naming_them(message, param):
    with pytest.raises(RequestError) as err:
        parse_messages([message])
    assert err.value.param == param


def test_parsers_whose_markers_are_special_tokens_get_them_in_the_text():
    from tests.server.parsers import P

    def skip(parser, **kw):
        p = RequestParser(P.tokenizer, ["m"], 1024, max_n=1, max_tokens_limit=16, max_stop=4,
                          tool_parser=parser and tool_parser(parser))
        body = {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, **kw}
        return p.parse_chat(body).params.skip_special_tokens

    assert skip("hermes") is False and skip("mistral") is False  # [TOOL_CALLS] is special
    assert skip("llama3_json") is True and skip("pythonic") is True
    assert skip("hermes", skip_special_tokens=True) is True  # the client's word wins
    assert skip(None, tool_choice="none") is True and skip("hermes", tool_choice="none") is True
