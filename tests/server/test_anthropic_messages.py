"""Anthropic's Messages API through the official ``anthropic`` client against a real server
(real engine, built-in tiny model) on 127.0.0.1: the body and the stream in vLLM 0.33's shapes,
the same tokens as the chat completion of the same conversation, stop sequences, usage,
count_tokens, the API key, and a disconnect freeing the request's blocks."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import anthropic
import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI

from kvpool.server.anthropic_view import stop_reason
from tests.server.helpers import generated_tokens, wait_free

MODEL = "kvpool-tiny"
GREEDY = {"temperature": 0}  # the SDK no longer has the field: sent as Claude Code sends it
ASK = [{"role": "user", "content": "What do the blocks of a paged cache store?"}]


def client(srv, **kw) -> AsyncAnthropic:
    if "auth_token" not in kw:
        kw.setdefault("api_key", "unused")
    return AsyncAnthropic(base_url=srv.url, max_retries=0, timeout=30, **kw)


async def chat(srv, messages, **kw):
    async with AsyncOpenAI(base_url=srv.v1, api_key="unused", max_retries=0) as c:
        return await c.chat.completions.create(model=MODEL, messages=messages,
                                               extra_body=GREEDY, **kw)


def prompt_of(msg) -> int:
    """The prompt's length: vLLM's usage splits it into input, cache reads and cache writes."""
    u = msg.usage
    return u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens


async def test_a_message_is_the_chat_completion_in_vllms_shape(srv):
    system = [{"role": "system", "content": "You are terse."}]
    kw = dict(model=MODEL, max_tokens=6, extra_body=GREEDY, system="You are terse.",
              messages=ASK, metadata={"user_id": "u1"})
    async with client(srv) as c:
        msg = await c.messages.create(**kw)
        want = await chat(srv, system + ASK, max_tokens=6)
        again = await c.messages.create(**kw)  # the chat's prompt is in the prefix cache now
    assert msg.id.startswith("chatcmpl-") and msg.type == "message"
    assert msg.role == "assistant" and msg.model == MODEL
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == want.choices[0].message.content == again.content[0].text
    assert msg.stop_reason == "max_tokens" and msg.stop_sequence is None
    prompt = want.usage.prompt_tokens
    assert msg.usage.output_tokens == 6 and prompt_of(msg) == prompt == prompt_of(again)
    assert msg.usage.cache_read_input_tokens == 0 and msg.usage.cache_creation_input_tokens > 0
    cached = want.usage.prompt_tokens_details.cached_tokens
    assert cached > 0 and again.usage.cache_read_input_tokens == cached
    assert again.usage.cache_creation_input_tokens == 0  # the chat wrote those blocks
    assert again.usage.input_tokens == prompt - cached  # vLLM's: the uncached rest


async def test_the_json_holds_vllms_fields_and_no_more(srv):
    body = {"model": MODEL, "max_tokens": 3, "messages": ASK}
    async with aiohttp.ClientSession() as s, s.post(srv.url + "/v1/messages", json=body) as r:
        assert r.status == 200 and r.content_type == "application/json"
        out = await r.json()
    assert list(out) == ["id", "type", "role", "content", "model", "stop_reason", "usage"]
    assert out["content"] == [{"type": "text", "text": out["content"][0]["text"]}]
    assert list(out["usage"]) == ["input_tokens", "output_tokens", "cache_creation_input_tokens",
                                  "cache_read_input_tokens"]


async def test_system_blocks_content_blocks_and_the_billing_header(srv):
    """System blocks join with no separator (Claude Code's billing line dropped); one text
    block is the string, several are joined as chat joins text parts."""
    blocks = [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1; cch=ab12;"},
              {"type": "text", "text": "You are "}, {"type": "text", "text": "terse."}]
    user = [{"role": "user", "content": [{"type": "text", "text": "Hello"},
                                         {"type": "text", "text": "there"}]}]
    async with client(srv) as c:
        msg = await c.messages.create(model=MODEL, max_tokens=5, extra_body=GREEDY,
                                      system=blocks, messages=user)
    want = await chat(srv, [{"role": "system", "content": "You are terse."},
                            {"role": "user", "content": "Hello\nthere"}], max_tokens=5)
    assert msg.content[0].text == want.choices[0].message.content
    assert prompt_of(msg) == want.usage.prompt_tokens


async def test_a_stop_sequence_ends_the_message(srv):
    async with client(srv) as c:
        base = await c.messages.create(model=MODEL, max_tokens=24, extra_body=GREEDY, messages=ASK)
        text = base.content[0].text
        assert len(text) >= 8, text
        stop = text[4:6]
        cut = await c.messages.create(model=MODEL, max_tokens=24, extra_body=GREEDY, messages=ASK,
                                      stop_sequences=["\x00never", stop])
        assert cut.content[0].text == text[:text.index(stop)]
        assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
        async with c.messages.stream(model=MODEL, max_tokens=24, extra_body=GREEDY, messages=ASK,
                                     stop_sequences=[stop]) as stream:
            final = await stream.get_final_message()
        assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop
        assert final.content[0].text == cut.content[0].text


def test_the_stop_reason_is_vllms():
    assert stop_reason("length", None, True, True) == ("max_tokens", None)
    assert stop_reason("stop", None, False, False) == ("end_turn", None)
    assert stop_reason("stop", 2, False, False) == ("end_turn", None)  # a stop token id
    assert stop_reason("stop", "##", False, False) == ("stop_sequence", "##")
    assert stop_reason("stop", "##", True, False) == ("stop_sequence", "##")  # call cut short
    assert stop_reason("stop", "##", True, True) == ("tool_use", None)
    assert stop_reason("tool_calls", None, True, True) == ("tool_use", None)
    assert stop_reason("abort", None, False, False) == (None, None)


async def test_the_stream_is_vllms_event_sequence(srv):
    async with client(srv) as c:
        whole = await c.messages.create(model=MODEL, max_tokens=8, extra_body=GREEDY, messages=ASK)
        async with c.messages.stream(model=MODEL, max_tokens=8, extra_body=GREEDY,
                                     messages=ASK) as stream:
            kinds = [e.type async for e in stream]
            final = await stream.get_final_message()
    raw = [k for k in kinds if k in ("message_start", "content_block_start",
                                     "content_block_delta", "content_block_stop",
                                     "message_delta", "message_stop")]
    assert raw[:2] == ["message_start", "content_block_start"]
    assert set(raw[2:-3]) == {"content_block_delta"}
    assert raw[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert final.id.startswith("chatcmpl-") and final.content[0].text == whole.content[0].text
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 8
    assert prompt_of(final) == prompt_of(whole)


async def read_events(resp) -> list[tuple[str, dict]]:
    """(event name, data) of each SSE event; every event's data type is its name."""
    events, name = [], None
    async for line in resp.content:
        line = line.decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            assert data["type"] == name
            events.append((name, data))
    return events


async def test_the_raw_stream_events(srv):
    body = {"model": MODEL, "max_tokens": 4, "messages": ASK, "stream": True}
    async with aiohttp.ClientSession() as s, s.post(srv.url + "/v1/messages", json=body) as r:
        assert r.status == 200 and r.content_type == "text/event-stream"
        events = await read_events(r)
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["stop_sequence"] is None and start["usage"]["output_tokens"] == 0
    assert events[1][1] == {"type": "content_block_start", "index": 0,
                            "content_block": {"type": "text", "text": ""}}
    deltas = [d for k, d in events if k == "content_block_delta"]
    assert all(d["index"] == 0 and d["delta"]["type"] == "text_delta" for d in deltas)
    assert events[-3][1] == {"type": "content_block_stop", "index": 0}
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 4
    assert events[-1][1] == {"type": "message_stop"}
    assert "ping" not in [k for k, _ in events]


async def test_count_tokens_is_the_prompt_the_message_runs(srv):
    kw = dict(model=MODEL, system=[{"type": "text", "text": "Be brief."}], messages=ASK)
    async with client(srv) as c:
        counted = await c.messages.count_tokens(**kw)
        msg = await c.messages.create(max_tokens=1, extra_body=GREEDY, **kw)
    assert counted.input_tokens == prompt_of(msg)
    body = {"model": MODEL, "messages": ASK}
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.url + "/v1/messages/count_tokens", json=body) as r:
            out = await r.json()
        async with s.post(srv.url + "/tokenize", json=body) as r:
            count = (await r.json())["count"]
    assert out == {"input_tokens": count, "context_management": {"original_input_tokens": count}}


async def test_the_api_key_is_a_bearer_token_as_vllm_reads_it(make_server):
    """vLLM 0.33's AuthenticationMiddleware reads only ``Authorization: Bearer`` (the SDK's
    auth_token), not the x-api-key header Anthropic clients send for an API key; a refusal is
    Anthropic's authentication_error."""
    async with make_server(api_key="sekrit") as srv:
        async with client(srv, auth_token="sekrit") as c:
            msg = await c.messages.create(model=MODEL, max_tokens=2, messages=ASK)
            assert msg.usage.output_tokens == 2
            assert (await c.messages.count_tokens(model=MODEL, messages=ASK)).input_tokens
        async with client(srv, api_key="wrong") as c:
            with pytest.raises(anthropic.AuthenticationError) as err:
                await c.messages.create(model=MODEL, max_tokens=2, messages=ASK)
        assert err.value.status_code == 401
        assert err.value.body == {"type": "error", "error": {
            "type": "authentication_error", "message": err.value.body["error"]["message"]}}
        body = {"model": MODEL, "max_tokens": 2, "messages": ASK}
        async with aiohttp.ClientSession() as s:
            for path in ("/v1/messages", "/v1/messages/count_tokens"):
                async with s.post(srv.url + path, json=body,
                                  headers={"x-api-key": "sekrit"}) as r:
                    assert r.status == 401
                    assert (await r.json())["error"]["type"] == "authentication_error"


async def test_an_unknown_model_is_not_found(srv):
    async with client(srv) as c:
        with pytest.raises(anthropic.NotFoundError) as err:
            await c.messages.create(model="nope", max_tokens=2, messages=ASK)
        assert err.value.body["type"] == "error"
        assert err.value.body["error"]["type"] == "not_found_error"
        with pytest.raises(anthropic.NotFoundError):
            await c.messages.count_tokens(model="nope", messages=ASK)


async def test_a_client_leaving_a_stream_frees_its_blocks(srv):
    baseline = srv.free()
    before = await generated_tokens(srv)
    body = {"model": MODEL, "max_tokens": 150, "messages": ASK, "stream": True,
            "temperature": 0}
    session = aiohttp.ClientSession()
    try:
        resp = await session.post(srv.url + "/v1/messages", json=body)
        assert resp.status == 200
        assert (await resp.content.readline()) == b"event: message_start\n"
        assert srv.free() < baseline  # the request is running
        resp.close()  # drop the connection mid-stream
    finally:
        await session.close()
    took = await wait_free(srv, baseline, timeout=5)
    assert srv.free() == baseline, f"blocks not back after {took:.2f}s"
    assert await generated_tokens(srv) - before < body["max_tokens"]  # aborted, not run out
    async with client(srv) as c:  # the server goes on serving
        msg = await c.messages.create(model=MODEL, max_tokens=2, messages=ASK)
        assert msg.usage.output_tokens == 2


async def test_output_config_format_holds_the_text_to_its_schema(srv):
    """vLLM's output_config.format (a JSON schema) is chat's response_format: the grammar
    holds the text, and its end is the model's (end_turn)."""
    schema = {"type": "object", "properties": {"n": {"enum": ["yes", "no"]}},
              "required": ["n"], "additionalProperties": False}
    async with client(srv) as c:
        msg = await c.messages.create(model=MODEL, max_tokens=40, messages=ASK,
                                      output_config={"format": {"type": "json_schema",
                                                                "schema": schema}},
                                      extra_body={"temperature": 1.0})
    assert msg.stop_reason == "end_turn", msg
    assert json.loads(msg.content[0].text)["n"] in ("yes", "no")


async def test_server_load_counts_a_message_in_flight():
    """vLLM's load_aware_call wraps both Messages routes: with load tracking on, a message
    held inside the engine's step is one on /load."""
    from tests.server.test_server_load import held_server, load

    body = {"model": MODEL, "max_tokens": 2, "messages": ASK, "stream": True}
    async with held_server() as (hold, url), aiohttp.ClientSession() as s:
        async def message() -> str:
            async with s.post(url + "/v1/messages", json=body) as r:
                return await r.text()

        task = asyncio.create_task(message())
        assert await asyncio.to_thread(hold.entered.wait, 10)
        assert await load(s, url) == {"server_load": 1}
        hold.go.set()
        assert "message_stop" in await task
        assert await load(s, url) == {"server_load": 0}
