"""Logprobs of a Responses answer that writes text and then a function call, through the openai
client on a real in-process kvpool server (built-in tiny model, ``--tool-call-parser
mistral``): the message item's output_text carries the logprobs of its own tokens
(NOTE(own-logprobs) in kvpool/server/responses.py), in vLLM's shape (token, logprob, bytes,
top_logprobs), not the call's.

The random model writes what ``text.format`` allows: one JSON string, ``"Sure.[TOOL_CALLS]
get_time{}"``, which the mistral parser reads as the text ``"Sure.`` and a get_time call
(arguments ``{}``, a JSON object that needs no quote)."""

from __future__ import annotations

import pytest

from tests.server.helpers import openai_client as client

SAYS = "Sure.[TOOL_CALLS]get_time{}"
TEXT = '"Sure.'  # the message: the output before the marker, its opening quote included
TOOLS = [{"type": "function", "name": "get_time", "parameters": {"type": "object"}}]
FORMAT = {"type": "json_schema", "name": "says", "schema": {"enum": [SAYS]}}


@pytest.fixture
async def msrv(make_server):
    async with make_server(max_model_len=1024, num_device_blocks=96,
                           app_options={"tool_call_parser": "mistral"}) as s:
        yield s


def ask(srv) -> dict:
    return dict(model=srv.engine.model_name, input="What time is it?", tools=TOOLS,
                text={"format": FORMAT}, max_output_tokens=60, temperature=0,
                include=["message.output_text.logprobs"], top_logprobs=2)


def own(part) -> list:
    """The part's logprobs, each checked for vLLM's shape; their tokens."""
    for lp in part.logprobs:
        assert lp.bytes == list(lp.token.encode()) and len(lp.top_logprobs) == 2, lp
    return [lp.token for lp in part.logprobs]


async def test_the_message_before_a_call_carries_its_own_tokens_logprobs(msrv):
    async with client(msrv) as c:
        r = await c.responses.create(**ask(msrv))
    message, call = r.output
    assert call.type == "function_call" and call.name == "get_time" and call.arguments == "{}"
    part = message.content[0]
    assert message.type == "message" and part.text == TEXT
    assert "".join(own(part)) == TEXT, part.logprobs  # they were []


async def test_a_streamed_message_before_a_call_carries_its_own_tokens_logprobs(msrv):
    """Streamed, the same: the message's deltas and its done part carry its own tokens, as
    the body does; the tokens of the call's marker and name went out as the message's, in
    output_text.delta events with no text."""
    async with client(msrv) as c:
        body = await c.responses.create(**ask(msrv))
        events = [e async for e in await c.responses.create(stream=True, **ask(msrv))]
    want = own(body.output[0].content[0])
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert "".join(e.delta for e in deltas) == TEXT
    assert [lp.token for e in deltas for lp in e.logprobs] == want, deltas
    done = [e for e in events if e.type == "response.output_text.done"]
    assert len(done) == 1 and done[0].logprobs == []  # vLLM's done event: the part has them
    parts = [e.part for e in events if e.type == "response.content_part.done"]
    assert own(parts[0]) == want
    message, call = events[-1].response.output
    assert own(message.content[0]) == want and call.name == "get_time"
