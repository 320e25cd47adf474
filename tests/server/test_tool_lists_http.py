"""``kvpool serve DIR --enable-auto-tool-choice --tool-call-parser granite`` on 127.0.0.1 (a
tiny random-weight Qwen2 directory; a regex makes it write Granite 3.1's array of two calls
after some text), through the official openai client: both calls come back, and the streamed
deltas join to the same calls."""

from __future__ import annotations

import json

import pytest
from openai import AsyncOpenAI

from tests.server.test_tool_families_http import serving_tiny_qwen2
from tests.server.test_tools_http import joined

pytest.importorskip("transformers")

ARRAY_REGEX = ('Sure\\.<tool_call> \\[\\{"name": "get_weather", "arguments": \\{"city": '
               '"(Paris|Rome)"\\}\\}, \\{"name": "get_time", "arguments": \\{\\}\\}\\]')
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": props}}}
    for name, props in (("get_weather", {"city": {"type": "string"}}), ("get_time", {}))]


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    yield from serving_tiny_qwen2(tmp_path_factory, "granite")


async def test_an_array_of_calls_comes_back_whole_and_streamed(url):
    async with AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                           timeout=120) as c:
        model = (await c.models.list()).data[0].id
        kw = dict(model=model, messages=[{"role": "user", "content": "Weather and time?"}],
                  tools=TOOLS, temperature=0, max_tokens=200,
                  extra_body={"structured_outputs": {"regex": ARRAY_REGEX}})
        choice = (await c.chat.completions.create(**kw)).choices[0]
        assert choice.finish_reason == "tool_calls", choice
        assert choice.message.content == "Sure."
        weather, clock = choice.message.tool_calls
        assert json.loads(weather.function.arguments)["city"] in ("Paris", "Rome")
        assert (clock.function.name, clock.function.arguments) == ("get_time", "{}")
        chunks = [ch async for ch in await c.chat.completions.create(**kw, stream=True)]
        assert joined(chunks) == ("Sure.", [(t.function.name, t.function.arguments)
                                            for t in (weather, clock)], "tool_calls")
