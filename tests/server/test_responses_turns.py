"""The system turns of a Responses prompt, as vLLM 0.33 builds them (responses/utils.py
construct_input_messages), on a real in-process server (built-in tiny model): empty
``instructions`` add none, and a ``previous_response_id`` continuation carries no system
message of the history it continues (responses_input.py NOTE(history)). Each prompt is
compared by its ``input_tokens`` with the same conversation sent whole."""

from __future__ import annotations

import aiohttp

SYSTEM = {"role": "system", "content": "Answer in one long sentence about paged caches."}
DEVELOPER = {"role": "developer", "content": "Be brief."}


async def create(s: aiohttp.ClientSession, srv, **body) -> dict:
    ask = {"model": srv.engine.model_name, "max_output_tokens": 3, "temperature": 0, **body}
    async with s.post(srv.v1 + "/responses", json=ask) as r:
        got = await r.json()
        assert r.status == 200, got
    return got


async def test_empty_instructions_add_no_system_turn(srv):
    async with aiohttp.ClientSession() as s:
        plain = await create(s, srv, input="hello")
        empty = await create(s, srv, input="hello", instructions="")
    assert empty["usage"]["input_tokens"] == plain["usage"]["input_tokens"], empty["usage"]
    assert empty["instructions"] == "" and plain["instructions"] is None  # echoed as sent


async def test_a_continuation_drops_the_historys_system_messages(srv):
    """Two turns deep: each earlier input's system message is dropped (the instructions were
    never carried), a developer message and the request's own system message stay."""
    hello, again = ({"role": "user", "content": t} for t in ("hello", "again"))
    async with aiohttp.ClientSession() as s:
        first = await create(s, srv, instructions="Be kind.", input=[SYSTEM, DEVELOPER, hello])
        second = await create(s, srv, previous_response_id=first["id"], input=[SYSTEM, again])
        third = await create(s, srv, previous_response_id=second["id"], input="and again")
        history = [DEVELOPER, hello, *first["output"]]
        second_whole = await create(s, srv, input=[*history, SYSTEM, again])
        third_whole = await create(s, srv, input=[*history, again, *second["output"],
                                                  {"role": "user", "content": "and again"}])
    tokens = [r["usage"]["input_tokens"] for r in (second, second_whole, third, third_whole)]
    assert tokens[0] == tokens[1] and tokens[2] == tokens[3], tokens
