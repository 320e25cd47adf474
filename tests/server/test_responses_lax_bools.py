"""The bool fields of /v1/responses not covered by test_lax_bool_tools.py (parallel_tool_calls,
store, background, a tool's strict) read as vLLM 0.33's ResponsesRequest reads a bool
(pydantic's lax bool, NOTE(lax-bool) in kvpool/server/json_body.py), on a real server on
127.0.0.1: ``"yes"``, ``1``, ``"on"`` answer as true does, ``"no"``, ``0``, ``"off"`` as false,
and the response echoes the bool read; anything else is a 400 OpenAI error naming the field,
the server keeps serving and nothing leaks (the ``make_server`` fixture checks the pool)."""

from __future__ import annotations

import json

import aiohttp
import pytest

from tests.server.test_responses_lax_numbers import PLAIN, answer, post

SPELLINGS = {True: ["yes", 1, "on", "T", 1.0], False: ["no", 0, "off", "f", 0.0]}
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def cache_options(prewarm: object) -> dict:
    return {"prompt_cache_options": {"mode": "explicit", "prewarm": prewarm}}


def strict(value: object) -> dict:
    return {"text": {"format": {"type": "json_schema", "name": "flag", "schema": SCHEMA,
                                "strict": value}}}


# (field, the body with a value): passed to the chat parser, read there as on chat
PASSED = [(f, lambda v, f=f: {f: v}) for f in (
    "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
    "include_stop_str_in_output")]
CASES = [("prompt_cache_options.prewarm", cache_options), ("text.format.strict", strict),
         *PASSED]


@pytest.mark.parametrize("field, with_value", CASES, ids=[f for f, _ in CASES])
async def test_a_bool_field_takes_what_vllm_reads_as_a_bool(srv, field, with_value):
    async with aiohttp.ClientSession() as s:
        for value, spellings in SPELLINGS.items():
            status, want = await post(s, srv, {**PLAIN, **with_value(value)})
            assert status == 200, want
            for other in spellings:
                status, got = await post(s, srv, {**PLAIN, **with_value(other)})
                assert status == 200 and answer(got) == answer(want), (other, got)


async def test_text_format_strict_is_echoed_as_the_bool_read(srv):
    async with aiohttp.ClientSession() as s:
        for value, spellings in SPELLINGS.items():
            for other in spellings[:2]:
                status, got = await post(s, srv, {**PLAIN, **strict(other)})
                assert status == 200, got
                assert json.dumps(got["text"]["format"]["strict"]) == json.dumps(value), got


async def test_stream_takes_what_vllm_reads_as_a_bool(srv):
    async with aiohttp.ClientSession() as s:
        for stream in ("true", "on", 1):
            async with s.post(srv.v1 + "/responses", json={**PLAIN, "stream": stream}) as r:
                assert r.headers["Content-Type"].startswith("text/event-stream"), stream
                assert "event: response.incomplete" in await r.text()
        status, want = await post(s, srv, PLAIN)
        for stream in ("false", "off", 0):
            status, got = await post(s, srv, {**PLAIN, "stream": stream})
            assert status == 200 and answer(got) == answer(want), got


# (the body with a value vLLM refuses, the param its 400 names)
REFUSED = [(cache_options("maybe"), "prompt_cache_options.prewarm"),
           (cache_options(2), "prompt_cache_options.prewarm"),
           (strict("sure"), "text.format"), (strict([]), "text.format")] + [
    (with_value(bad), field) for field, with_value in PASSED for bad in ("maybe", 2)] + [
    ({"stream": bad}, "stream") for bad in (" true", 0.5)]


async def test_what_vllm_refuses_is_a_400_naming_the_field(srv):
    async with aiohttp.ClientSession() as s:
        for body, param in REFUSED:
            status, got = await post(s, srv, {**PLAIN, **body})
            assert status == 400 and set(got) == {"error"}, (body, got)
            assert set(got["error"]) == {"message", "type", "param", "code"}
            assert got["error"]["param"] == param, (body, got)
        status, got = await post(s, srv, PLAIN)  # still serving
        assert status == 200 and got["usage"]["output_tokens"] == 3, got
