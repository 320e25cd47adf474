"""Responses API requests vLLM's server answers 200 to, through the openai client on a real
in-process kvpool server: each is a 200 here too and does what vLLM does with it."""

from __future__ import annotations

import aiohttp
from openai import AsyncOpenAI


def client(srv) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=srv.v1, api_key="unused", max_retries=0, timeout=60)


async def prompt_tokens(srv, content: str) -> int:
    async with aiohttp.ClientSession() as s:
        body = {"messages": [{"role": "user", "content": content}]}
        async with s.post(srv.url + "/tokenize", json=body) as r:
            assert r.status == 200
            return (await r.json())["count"]


async def test_input_text_parts_join_with_newlines_as_chat_does(srv):
    parts = [{"type": "input_text", "text": "one"}, {"type": "input_text", "text": "two"}]
    joined, glued = await prompt_tokens(srv, "one\ntwo"), await prompt_tokens(srv, "onetwo")
    assert joined != glued  # the test tells the two apart
    async with client(srv) as c:
        r = await c.responses.create(model=srv.engine.model_name, max_output_tokens=1,
                                     input=[{"role": "user", "content": parts}])
    assert r.usage.input_tokens == joined
