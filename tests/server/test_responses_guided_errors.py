"""Structured-output errors on ``/v1/responses`` name ``text.format``, the field a Responses
client sends its constraint in, never ``response_format`` (the chat field the body becomes,
responses_input.py): a 400 at parse time, a 400 of the compile on the worker thread (over
budget, allows nothing), and a grammar breaking mid-generation (grammar_matchers.py
NOTE(grammar-error)): a 500 ``generation_error``, or the stream's ``error`` event. Through a
real server on 127.0.0.1 (tests/server/conftest.py ``srv``); nothing leaks."""

from __future__ import annotations

import json

import aiohttp

from tests.server.helpers import wait_free

PARAM = "text.format"


def string(pattern: str) -> dict:
    return {"type": "string", "pattern": pattern}


def text_format(schema) -> dict:
    return {"text": {"format": {"type": "json_schema", "name": "t", "schema": schema}}}


AT_PARSE = [string("(a"), string("a\\"), {"type": "nope"}]
AT_COMPILE = [string("^x{100000}$"),  # over budget
              {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}]  # allows nothing
# passes the compile's probes, then its masks run out of fuel midway (test_guided_errors.py)
MIDWAY = string("^([a-z]{1,10}){500}$")


async def post(s: aiohttp.ClientSession, url: str, body: dict) -> tuple[int, dict]:
    async with s.post(url, json=body) as r:
        return r.status, await r.json()


def names_text_format(err: dict, prefix: str = "") -> None:
    assert err["param"] == PARAM, err
    assert err["message"].startswith(f"{prefix}{PARAM}: "), err
    assert "response_format" not in err["message"], err


async def served_and_nothing_leaked(srv, s: aiohttp.ClientSession, free: int) -> None:
    status, body = await post(s, srv.v1 + "/responses", {"input": "hi", "max_output_tokens": 4})
    assert status == 200 and body["status"] == "incomplete", body
    await wait_free(srv, free)
    assert srv.free() == free


async def test_refused_text_formats_name_text_format(srv):
    free = srv.free()
    async with aiohttp.ClientSession() as s:
        for schema in AT_PARSE + AT_COMPILE:
            for stream in (False, True):  # refused before the stream opens
                status, body = await post(s, srv.v1 + "/responses", {
                    "input": "hi", "max_output_tokens": 4, "stream": stream,
                    **text_format(schema)})
                assert status == 400, (schema, body)
                assert body["error"]["type"] == "invalid_request_error", body
                names_text_format(body["error"])
        await served_and_nothing_leaked(srv, s, free)


async def test_a_text_format_that_breaks_midway_names_text_format(srv):
    free = srv.free()
    body = {"input": "hi", "max_output_tokens": 200, "temperature": 1.0, "seed": 1,
            **text_format(MIDWAY)}
    async with aiohttp.ClientSession() as s:
        status, plain = await post(s, srv.v1 + "/responses", body)
        assert status == 500, plain
        async with s.post(srv.v1 + "/responses",
                          json={**body, "stream": True}) as r:
            assert r.status == 200
            events = [json.loads(line[6:]) for line in (await r.text()).splitlines()
                      if line.startswith("data: {")]
        last = events[-1]  # the failure after the headers went out: an error event
        assert last["type"] == "error", last
        assert not [e for e in events if e["type"] in ("response.completed",
                                                        "response.incomplete")], events
        for err in (plain["error"], last):
            assert err["code"] == "generation_error", err
            names_text_format(err, "generation failed: ")
        await served_and_nothing_leaked(srv, s, free)
