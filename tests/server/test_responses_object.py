"""The response object's fields as vLLM 0.33 gives them (its ResponsesResponse.from_request,
dumped whole: a field not sent is null or its default), in the body, the stream's
response.created / response.completed events and a stored GET."""

from __future__ import annotations

import json

import aiohttp

PLAIN = {"input": "hi", "max_output_tokens": 3, "temperature": 0}


async def answers(srv, body: dict) -> list[dict]:
    """The response objects of ``body``: the body, its GET, and a stream's created and
    completed events' (then that one's GET)."""
    out = []
    async with aiohttp.ClientSession() as s:
        for stream in (False, True):
            async with s.post(srv.v1 + "/responses", json={**body, "stream": stream}) as r:
                assert r.status == 200, await r.text()
                if stream:
                    events = [json.loads(line[6:]) for line in (await r.text()).splitlines()
                              if line.startswith("data: ")]
                    got = [e["response"] for e in events if e["type"] in
                           ("response.created", "response.completed")]
                else:
                    got = [await r.json()]
            async with s.get(f"{srv.v1}/responses/{got[-1]['id']}") as r:
                out += got + [await r.json()]
    assert len(out) == 5
    return out


async def test_text_is_null_when_not_sent_and_echoed_whole_when_sent(srv):
    """vLLM echoes the request's ``text`` (None when not sent) as ResponseTextConfig dumps it:
    ``verbosity`` and a json_schema format's ``description`` / ``strict`` null if not sent."""
    assert [r["text"] for r in await answers(srv, PLAIN)] == [None] * 5
    sent = {"format": {"type": "text"}, "verbosity": "low"}
    assert [r["text"] for r in await answers(srv, {**PLAIN, "text": sent})] == [sent] * 5
    schema = {"type": "json_schema", "name": "t", "schema": {"type": "object"}}
    got = await answers(srv, {**PLAIN, "text": {"format": schema}})
    want = {"format": {**schema, "description": None, "strict": None}, "verbosity": None}
    assert [r["text"] for r in got] == [want] * 5
    async with aiohttp.ClientSession() as s:
        bad = {**PLAIN, "text": {"verbosity": "loud"}}
        async with s.post(srv.v1 + "/responses", json=bad) as r:
            err = (await r.json())["error"]
            assert r.status == 400 and err["param"] == "text.verbosity", err


async def test_tool_choice_is_none_without_tools_and_metadata_null_when_not_sent(srv):
    """vLLM's check_tool_usage makes an ``auto`` / ``none`` choice without tools ``none`` (the
    request it echoes); ``metadata`` is the request's, null when not sent."""
    def seen(got: list[dict]) -> set[tuple[str, str]]:
        return {(r["tool_choice"], json.dumps(r["metadata"])) for r in got}

    assert seen(await answers(srv, PLAIN)) == {("none", "null")}
    sent = {**PLAIN, "tool_choice": "auto", "tools": [], "metadata": {"k": "v"}}
    assert seen(await answers(srv, sent)) == {("none", '{"k": "v"}')}
    tool = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
    got = await answers(srv, {**PLAIN, "tools": [tool]})
    assert {r["tool_choice"] for r in got} == {"auto"}  # tools: the default stays auto
