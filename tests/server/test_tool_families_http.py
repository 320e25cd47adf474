"""``kvpool serve DIR --enable-auto-tool-choice --tool-call-parser qwen3_coder`` on 127.0.0.1
(a tiny random-weight Qwen2 directory; a regex makes it write a Qwen3-Coder XML call after some
text), through the official openai client: each value of the call takes the type the
request's own tool schema gives it (the same output typed two ways by two requests), the
streamed deltas join to the non-streamed call, and /v1/responses returns the same call as a
function_call item."""

from __future__ import annotations

import json

import pytest
from openai import AsyncOpenAI

from tests.runtime.model.helpers import save_hf_model
from tests.server.chat_templates import TOOL_CHATML, model_dir
from tests.server.helpers import ServerProcess, post_ok
from tests.server.test_tools_http import joined

pytest.importorskip("transformers")

XML_REGEX = ('Checking\\.\\n<tool_call>\\n<function=get_weather>\\n<parameter=city>\\n'
             '(Paris|Rome)\\n</parameter>\\n<parameter=days>\\n[1-9]\\n</parameter>\\n'
             '<parameter=hot>\\n(true|false)\\n</parameter>\\n</function>\\n</tool_call>')
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def weather(days: str, hot: str) -> list[dict]:
    """The one tool, its ``days`` and ``hot`` of the given schema types."""
    return [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": days},
                                         "hot": {"type": hot}}}}}]


def serving_tiny_qwen2(tmp_path_factory, parser: str):
    """A module fixture's body: a tiny random Qwen2 with a ChatML tool template, served with
    ``--tool-call-parser parser``; its URL."""
    d = tmp_path_factory.mktemp(f"{parser}_model")
    save_hf_model(d, "qwen2", vocab_size=320)
    model_dir(d, TOOL_CHATML, "<|im_start|>", "<|im_end|>")
    yield from ServerProcess.serving(d, "--enable-auto-tool-choice", "--tool-call-parser",
                                     parser)


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    yield from serving_tiny_qwen2(tmp_path_factory, "qwen3_coder")


async def test_values_take_each_requests_schema_types_and_the_stream_agrees(url):
    async with AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                           timeout=120) as c:
        model = (await c.models.list()).data[0].id
        typed = {}
        for days, hot in (("integer", "boolean"), ("string", "string")):
            kw = dict(model=model, messages=ASK, tools=weather(days, hot), temperature=0,
                      max_tokens=200, extra_body={"structured_outputs": {"regex": XML_REGEX}})
            choice = (await c.chat.completions.create(**kw)).choices[0]
            assert choice.finish_reason == "tool_calls", choice
            assert choice.message.content == "Checking.\n"
            (call,) = choice.message.tool_calls
            assert call.function.name == "get_weather" and call.id.startswith("chatcmpl-tool-")
            typed[days] = json.loads(call.function.arguments)
            chunks = [ch async for ch in await c.chat.completions.create(**kw, stream=True)]
            assert joined(chunks) == ("Checking.\n", [("get_weather", call.function.arguments)],
                                      "tool_calls")
    as_int, as_text = typed["integer"], typed["string"]
    assert as_int["city"] in ("Paris", "Rome") and isinstance(as_int["days"], int)
    assert isinstance(as_int["hot"], bool)
    assert as_text == {"city": as_int["city"], "days": str(as_int["days"]),
                       "hot": json.dumps(as_int["hot"])}


async def test_responses_return_the_typed_call_as_a_function_call_item(url):
    tools = [{"type": "function", **weather("integer", "boolean")[0]["function"]}]
    body = await post_ok(url + "/v1/responses", {
        "input": ASK[0]["content"], "tools": tools, "temperature": 0, "max_output_tokens": 200,
        "structured_outputs": {"regex": XML_REGEX}})
    calls = [item for item in body["output"] if item["type"] == "function_call"]
    assert len(calls) == 1 and calls[0]["name"] == "get_weather", body["output"]
    args = json.loads(calls[0]["arguments"])
    assert isinstance(args["days"], int) and isinstance(args["hot"], bool), args
