"""A Responses stream's events in vLLM 0.33's order (NOTE(open-at-text) in
kvpool/server/responses_view.py: the message opens at its first text), read as raw SSE and
through the openai client's own stream parser, on a real in-process kvpool server."""

from __future__ import annotations

import json

import aiohttp
from openai import AsyncOpenAI

PLAIN = {"input": "hi", "max_output_tokens": 3, "temperature": 0}
OPENING = ["response.created", "response.in_progress"]
MESSAGE = ["response.output_item.added", "response.content_part.added"]


async def sse(srv, body: dict) -> list[dict]:
    """The stream of ``body`` as raw SSE: each event's ``event:`` line names its type."""
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + "/responses", json={**body, "stream": True}) as r:
            assert r.status == 200, await r.text()
            raw = await r.text()
    events = []
    for block in filter(None, raw.split("\n\n")):
        kind, data = block.split("\n")
        assert kind.startswith("event: ") and data.startswith("data: "), block
        events.append(json.loads(data[len("data: "):]))
        assert events[-1]["type"] == kind[len("event: "):]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


async def test_the_message_opens_at_its_first_text_as_vllms(srv):
    events = await sse(srv, PLAIN)
    kinds = [e["type"] for e in events]
    first = kinds.index("response.output_text.delta")
    assert kinds[:first] == OPENING + MESSAGE, kinds
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert all(deltas), deltas  # vLLM sends no delta without text
    text = "".join(deltas)
    none = await sse(srv, {**PLAIN, "stop": [text[0]]})  # no text at all: no item
    assert [e["type"] for e in none] == OPENING + ["response.completed"], none
    assert none[-1]["response"]["output"] == []
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{srv.v1}/responses/{none[-1]['response']['id']}") as r:
            assert (await r.json())["output"] == []


async def test_the_openai_clients_stream_parser_reads_vllms_order(srv):
    """The client's ResponseStream builds its snapshot from the events (an event for an
    item it was not told of raises there): the text when there is some, no output when
    there is none."""
    ask = {**PLAIN, "model": srv.engine.model_name}
    async with AsyncOpenAI(base_url=srv.v1, api_key="unused", max_retries=0,
                           timeout=60) as c:
        async with c.responses.stream(**ask) as stream:
            events = [e async for e in stream]
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert [e.type for e in events[:4]] == OPENING + MESSAGE
        assert text and events[-1].response.output_text == text  # cut: response.incomplete
        stop = {"stop": [text[0]]}
        async with c.responses.stream(**ask, extra_body=stop) as stream:
            seen = [e.type async for e in stream]
            empty = await stream.get_final_response()
    assert seen == OPENING + ["response.completed"], seen
    assert (empty.status, empty.output, empty.output_text) == ("completed", [], "")
