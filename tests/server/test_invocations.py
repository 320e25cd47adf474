"""NOTE(invocations) in route_bodies.py: vLLM's SageMaker route, ``POST /invocations``, runs a
chat body (one with ``messages``) as /v1/chat/completions and any other body as
/v1/completions, streamed or not; what either route refuses it refuses with the same 400.
Real server (the fixture checks every block is back after each test), raw aiohttp client, as
SageMaker's invoke_endpoint sends the body."""

from __future__ import annotations

import json

import aiohttp

CHAT = {"messages": [{"role": "user", "content": "tell me"}], "max_tokens": 6,
        "temperature": 0}
COMPLETION = {"prompt": "once upon a time", "max_tokens": 6, "temperature": 0}


async def post(s: aiohttp.ClientSession, url: str, body: dict) -> tuple[int, dict]:
    async with s.post(url, json=body) as r:
        return r.status, await r.json(content_type=None)


async def streamed(s: aiohttp.ClientSession, url: str, body: dict) -> list[str]:
    """The data lines of an SSE answer, [DONE] included."""
    async with s.post(url, json={**body, "stream": True}) as r:
        assert r.status == 200 and r.content_type == "text/event-stream"
        text = (await r.read()).decode()
    return [line[6:] for line in text.splitlines() if line.startswith("data: ")]


async def test_a_chat_body_is_a_chat_completion_and_a_prompt_body_a_completion(srv):
    async with aiohttp.ClientSession() as s:
        for body, path, obj in ((CHAT, "/v1/chat/completions", "chat.completion"),
                                (COMPLETION, "/v1/completions", "text_completion")):
            status, out = await post(s, srv.url + "/invocations", body)
            assert status == 200 and out["object"] == obj, out
            status, direct = await post(s, srv.url + path, body)
            assert status == 200
            assert out["choices"] == direct["choices"]  # greedy: the same answer
            assert out["usage"]["prompt_tokens"] == direct["usage"]["prompt_tokens"]


async def test_either_body_streams_as_its_route_does(srv):
    async with aiohttp.ClientSession() as s:
        for body, obj in ((CHAT, "chat.completion.chunk"), (COMPLETION, "text_completion")):
            lines = await streamed(s, srv.url + "/invocations", body)
            assert lines[-1] == "[DONE]"
            chunks = [json.loads(x) for x in lines[:-1]]
            assert chunks and all(c["object"] == obj for c in chunks)
            assert chunks[-1]["choices"][0]["finish_reason"] == "length"


async def test_what_the_routes_refuse_it_refuses_with_their_400(srv):
    cases = [({"max_tokens": 4}, "prompt"),  # neither messages nor prompt: a completion body
             ({"messages": "hi", "prompt": "hi"}, "messages"),  # chat's error names the field
             ({"prompt": "hi", "max_tokens": -1}, "max_tokens")]
    async with aiohttp.ClientSession() as s:
        for body, field in cases:
            status, out = await post(s, srv.url + "/invocations", body)
            assert status == 400, (body, out)
            assert out["error"]["type"] == "invalid_request_error"
            assert field in out["error"]["message"], out
        status, out = await post(s, srv.url + "/invocations", COMPLETION)
        assert status == 200  # the refusals left the server serving


async def test_with_an_api_key_it_takes_the_key_as_the_v1_routes_do(make_server):
    """NOTE(invocations-key) in api_key.py: vLLM leaves /invocations open; here a made-up
    bearer token generated there and was read as a tenant of its own (its own quota and
    prefix cache). Now no key or a wrong one is the /v1 routes' 401."""
    async with make_server(api_key="right") as srv, aiohttp.ClientSession() as s:
        for headers in ({}, {"Authorization": "Bearer made-up"}):
            async with s.post(srv.url + "/invocations", json=COMPLETION, headers=headers) as r:
                assert r.status == 401, headers
                assert (await r.json())["error"]["code"] == "invalid_api_key"
        async with s.post(srv.url + "/invocations", json=COMPLETION,
                          headers={"Authorization": "Bearer right"}) as r:
            assert r.status == 200 and (await r.json())["object"] == "text_completion"
