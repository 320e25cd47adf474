"""Hostile input to ``/v1/messages`` and ``/v1/messages/count_tokens`` on a real server on
127.0.0.1 (raw aiohttp, no SDK to tidy the bodies): each gets Anthropic's error JSON with the
status and error type vLLM 0.33 gives it, while a stream next to them runs to its end and no
block leaks (the fixture checks the pool at teardown)."""

from __future__ import annotations

import json

import aiohttp
import pytest

from tests.server.helpers import wait_free

MODEL = "kvpool-tiny"
ASK = [{"role": "user", "content": "hi"}]
OK = {"model": MODEL, "max_tokens": 4, "messages": ASK}
TOOL = {"name": "f", "input_schema": {"type": "object"}}

BAD = {  # name: (body, the message's start)
    "no max_tokens": ({"model": MODEL, "messages": ASK}, "max_tokens: is required"),
    "negative max_tokens": ({**OK, "max_tokens": -1}, "max_tokens: must be a positive"),
    "zero max_tokens": ({**OK, "max_tokens": 0}, "max_tokens: must be a positive"),
    "huge max_tokens": ({**OK, "max_tokens": 10 ** 12}, "max_tokens: must be at most"),
    # pydantic's lax int takes "4" and 4.0 (test_anthropic_vllm_rules.py), not a fraction
    "max_tokens fraction": ({**OK, "max_tokens": 4.5}, "max_tokens: must be a positive"),
    "max_tokens text": ({**OK, "max_tokens": "4.5"}, "max_tokens: must be a positive"),
    "stream 2": ({**OK, "stream": 2}, "stream: must be a boolean"),
    "no model": ({"max_tokens": 4, "messages": ASK}, "model: is required"),
    "tool role": ({**OK, "messages": [{"role": "tool", "content": "x"}]},
                  "messages[0].role: must be one of user, assistant, system"),
    "role missing": ({**OK, "messages": [{"content": "x"}]}, "messages[0].role"),
    "messages a string": ({**OK, "messages": "hi"}, "messages: must be a list"),
    "messages missing": ({"model": MODEL, "max_tokens": 4}, "messages: must be a list"),
    "message not an object": ({**OK, "messages": ["hi"]}, "messages[0]: must be an object"),
    "unknown block": ({**OK, "messages": [{"role": "user", "content": [{"type": "video"}]}]},
                      "messages[0].content[0].type: must be one of text"),
    "block not an object": ({**OK, "messages": [{"role": "user", "content": [7]}]},
                            "messages[0].content[0]: must be a content block"),
    "text not a string": ({**OK, "messages": [{"role": "user", "content": [
        {"type": "text", "text": 5}]}]}, "messages[0].content[0].text: must be a string"),
    "content a number": ({**OK, "messages": [{"role": "user", "content": 5}]},
                         "messages[0].content: must be a string or a list"),
    "tool_use input not an object": ({**OK, "messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": [1]}]}]},
        "messages[0].content[0].input: must be an object"),
    "system a number": ({**OK, "system": 5}, "system: must be a string or a list"),
    "schema not an object": ({**OK, "tools": [{"name": "f", "input_schema": "x"}],
                              "tool_choice": {"type": "any"}}, "tools[0].input_schema: is"),
    "schema of no type": ({**OK, "tools": [{"name": "f", "input_schema": {"type": "bogus"}}],
                           "tool_choice": {"type": "any"}},
                          "tools[0].input_schema: invalid JSON schema"),
    "bad tool name": ({**OK, "tools": [{"name": "f\nf", "input_schema": {}}],
                       "tool_choice": {"type": "any"}}, "tools[0].name: is required"),
    "tools not a list": ({**OK, "tools": {"name": "f"}}, "tools: must be a list"),
    "tool choice of no name": ({**OK, "tools": [TOOL], "tool_choice": {"type": "tool"}},
                               "tool_choice.name: is required"),
    "tool choice unknown": ({**OK, "tools": [TOOL], "tool_choice": {"type": "maybe"}},
                            "tool_choice: must be"),
    "auto without a parser": ({**OK, "tools": [TOOL]}, '"auto" tool choice requires'),
    "stop_sequences a string": ({**OK, "stop_sequences": "x"}, "stop_sequences: must be"),
    "too many stop_sequences": ({**OK, "stop_sequences": list("abcde")},
                                "stop_sequences: "),  # value-limit wording: body_fields.py
    "temperature text": ({**OK, "temperature": "hot"}, "temperature: must be a number"),
    "thinking budget": ({**OK, "thinking": {"type": "enabled", "budget_tokens": 10}},
                        "thinking.budget_tokens: must be an integer >= 1024"),
    "thinking display": ({**OK, "thinking": {"type": "adaptive", "display": "full"}},
                         "thinking.display: must be one of summarized, omitted, updates"),
    "effort minimal": ({**OK, "output_config": {"effort": "minimal"}},
                       "output_config.effort: must be one of low, medium, high, xhigh, max"),
    "a body that is a list": ([OK], "request body must be a JSON object"),
    "too long a prompt": ({**OK, "messages": [{"role": "user", "content": "a b " * 400}]},
                          "messages: this model's maximum context length is 256 tokens"),
}


def check_error(status: int, body: dict, want_status: int, kind: str) -> str:
    assert status == want_status, body
    assert body == {"type": "error", "error": {"type": kind, "message": body["error"]["message"]}}
    return body["error"]["message"]


async def post(s: aiohttp.ClientSession, url: str, body, **kw) -> tuple[int, dict]:
    async with s.post(url, json=body, **kw) as r:
        return r.status, await r.json()


async def test_hostile_bodies_are_anthropic_400s_beside_a_stream(srv):
    baseline = srv.free()
    url = srv.url + "/v1/messages"
    async with aiohttp.ClientSession() as s:
        stream = await s.post(url, json={**OK, "max_tokens": 40, "stream": True})
        assert stream.status == 200
        for name, (body, start) in BAD.items():
            status, out = await post(s, url, body)
            assert check_error(status, out, 400, "invalid_request_error").startswith(start), \
                (name, out)
        for name in ("no model", "messages a string", "unknown block", "schema not an object",
                     "too long a prompt"):  # vLLM's input check refuses a count past it too
            status, out = await post(s, url + "/count_tokens", BAD[name][0])
            assert check_error(status, out, 400, "invalid_request_error").startswith(
                BAD[name][1]), (name, out)
        text = (await stream.read()).decode()
        assert text.rstrip().endswith('data: {"type":"message_stop"}'), text[-200:]
        status, out = await post(s, url, OK)
        assert status == 200 and out["usage"]["output_tokens"] == 4
    await wait_free(srv, baseline)
    assert srv.free() == baseline


@pytest.mark.parametrize("method,path,status,kind", [
    ("GET", "/v1/messages", 405, "invalid_request_error"),
    ("POST", "/v1/messages/nope", 404, "not_found_error"),
    ("GET", "/v1/messages/count_tokens", 405, "invalid_request_error"),
])
async def test_routing_errors_on_the_messages_paths(srv, method, path, status, kind):
    async with aiohttp.ClientSession() as s, s.request(method, srv.url + path, json=OK) as r:
        check_error(r.status, await r.json(), status, kind)


async def test_unreadable_bodies_and_the_unknown_model(srv):
    url = srv.url + "/v1/messages"
    async with aiohttp.ClientSession() as s:
        for data, headers in ((b"{bad", {"Content-Type": "application/json"}),
                              (json.dumps(OK).encode(), {"Content-Type": "text/plain"})):
            async with s.post(url, data=data, headers=headers) as r:
                check_error(r.status, await r.json(), 400, "invalid_request_error")
        async with s.post(url, data=b"x" * 70_000,
                          headers={"Content-Type": "application/json"}) as r:
            check_error(r.status, await r.json(), 413, "request_too_large")
        for path, body in (("", {**OK, "model": "gpt-4"}),
                           ("/count_tokens", {"model": "gpt-4", "messages": ASK})):
            status, out = await post(s, url + path, body)
            assert "gpt-4" in check_error(status, out, 404, "not_found_error")


async def test_a_full_queue_is_overloaded(make_server):
    """The gate's 503 (here: the queue holds one request and a second is refused) is
    Anthropic's overloaded_error, as vLLM names a 503, with its Retry-After."""
    async with make_server(max_num_seqs=1, max_queue=1) as srv:
        url = srv.url + "/v1/messages"
        async with aiohttp.ClientSession() as s:
            first = await s.post(url, json={**OK, "max_tokens": 100, "stream": True})
            assert first.status == 200
            async with s.post(url, json=OK) as r:
                check_error(r.status, await r.json(), 503, "overloaded_error")
                assert r.headers["Retry-After"]
            first.close()


async def test_other_routes_keep_openai_errors(srv):
    async with aiohttp.ClientSession() as s:
        status, out = await post(s, srv.v1 + "/chat/completions", {"model": MODEL})
        assert status == 400 and set(out) == {"error"} and out["error"]["param"] == "messages"
