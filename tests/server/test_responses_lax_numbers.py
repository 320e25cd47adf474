"""The number fields of /v1/responses read as vLLM 0.33's ResponsesRequest reads them
(pydantic's lax int and float: NOTE(lax-int), NOTE(lax-float) in kvpool/server/query_int.py),
on a real server on 127.0.0.1: ``"3"``, ``3.0`` and ``true`` (1) answer as 3 does, ``"0.5"``
as 0.5, and the response echoes the number, not the spelling. ``top_logprobs`` takes a string
here (vLLM's Responses model has no check_logprobs, unlike its chat one). A value vLLM refuses
is a 400 OpenAI error naming the field, and the server keeps serving with nothing leaked (the
``make_server`` fixture checks the pool's blocks at the end)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from tests.server.test_lax_bool_fields import same

PLAIN = {"input": "Once upon a time", "max_output_tokens": 3, "temperature": 0}
SAMPLED = {**PLAIN, "temperature": 1, "seed": 7}
LOGPROBS = {**PLAIN, "include": ["message.output_text.logprobs"]}
# (body, field, the plain value, spellings vLLM reads as it)
CASES = [
    (PLAIN, "max_output_tokens", 3, ["3", 3.0, " +3 ", "0_3"]),
    (PLAIN, "max_output_tokens", 1, [True, "1"]),
    (LOGPROBS, "top_logprobs", 2, ["2", 2.0]),
    (LOGPROBS, "top_logprobs", 1, [True, "01"]),
    (PLAIN, "top_logprobs", 2, ["2", 2.0, True]),  # not asked: echoed null
    (PLAIN, "max_tool_calls", 2, ["2", 2.0]),
    (PLAIN, "max_tool_calls", 1, [True]),
    # read by the chat parser they pass to (sampling_fields.py), here as on chat
    (SAMPLED, "temperature", 0.5, ["0.5", " .5", "5e-1"]),
    (SAMPLED, "top_p", 0.5, ["0.5", "0_.5"]),
    (SAMPLED, "top_k", 2, ["2", 2.0]),
    (SAMPLED, "seed", 3, ["3", 3.0]),
    (SAMPLED, "min_p", 0.5, ["0.5"]),
    (SAMPLED, "presence_penalty", 1, ["1", True, "1.0"]),
    (SAMPLED, "frequency_penalty", 0.5, ["0.5"]),
    (SAMPLED, "repetition_penalty", 1.5, ["1.5"]),
    (PLAIN, "priority", 1, ["1", True]),
    (PLAIN, "logit_bias", {"5": 10}, [{"5": "10"}, {"5": "1e1"}]),
    (PLAIN, "stop_token_ids", [5], [["5"], [5.0]]),
]


async def post(s: aiohttp.ClientSession, srv, body: dict) -> tuple[int, dict]:
    async with s.post(srv.v1 + "/responses", json=body) as r:
        return r.status, await r.json()


def answer(body: dict[str, Any]) -> str:
    """The response less what differs between two runs of one request (ids, times, usage's
    prefix-cache counts), as JSON text: an echo of ``3.0`` or ``true`` for 3 shows."""
    kept = {k: v for k, v in body.items() if k not in ("id", "created_at", "usage")}
    kept["output"] = [{k: v for k, v in item.items() if k != "id"} for item in body["output"]]
    return json.dumps(same(kept), sort_keys=True)


@pytest.mark.parametrize("body, field, value, spellings", CASES,
                         ids=[f"{f}-{v}" for _, f, v, _ in CASES])
async def test_a_number_field_takes_what_vllm_reads_as_its_number(srv, body, field, value,
                                                                   spellings):
    async with aiohttp.ClientSession() as s:
        status, want = await post(s, srv, {**body, field: value})
        assert status == 200, want
        for other in spellings:
            status, got = await post(s, srv, {**body, field: other})
            assert status == 200 and answer(got) == answer(want), (other, got)


async def test_the_echoes_are_the_numbers_read(srv):
    async with aiohttp.ClientSession() as s:
        status, got = await post(s, srv, {**LOGPROBS, "max_output_tokens": "2",
                                          "top_logprobs": "1", "max_tool_calls": 4.0})
        assert status == 200, got
        echoed = {k: got[k] for k in ("max_output_tokens", "top_logprobs", "max_tool_calls")}
        assert json.dumps(echoed) == json.dumps({"max_output_tokens": 2, "top_logprobs": 1,
                                                 "max_tool_calls": 4}), echoed
        top = got["output"][0]["content"][0]["logprobs"][0]["top_logprobs"]
        assert len(top) == 1, top
        async with s.post(srv.v1 + "/responses", json={**PLAIN, "max_output_tokens": "2",
                                                       "stream": "true"}) as r:
            events = [json.loads(line[6:]) for line in (await r.text()).splitlines()
                      if line.startswith("data: {")]
        assert r.status == 200 and events[-1]["type"] == "response.incomplete", events[-1]
        assert json.dumps(events[-1]["response"]["max_output_tokens"]) == "2", events[-1]


# (body, field, a value vLLM refuses)
REFUSED = [(PLAIN, "max_output_tokens", bad) for bad in (2.5, "1e3", "three", [3], 2.0 ** 63)] \
    + [(b, "top_logprobs", bad) for b in (PLAIN, LOGPROBS) for bad in ("1.5", "x", {})] \
    + [(PLAIN, "max_tool_calls", bad) for bad in ("2.5", 1.5, {})] \
    + [(PLAIN, "seed", 2.0 ** 63), (PLAIN, "temperature", "hot"), (PLAIN, "top_k", "0x10"),
       (PLAIN, "top_p", " 1_0"), (PLAIN, "presence_penalty", []), (PLAIN, "priority", {})]


async def test_what_vllm_refuses_is_a_400_naming_the_field(srv):
    async with aiohttp.ClientSession() as s:
        for body, field, bad in REFUSED:
            for stream in (False, True):  # refused before a stream opens
                status, got = await post(s, srv, {**body, field: bad, "stream": stream})
                assert status == 400 and set(got) == {"error"}, (field, bad, got)
                error = got["error"]
                assert set(error) == {"message", "type", "param", "code"}
                assert error["param"] == field, (bad, error)
                assert error["type"] == "invalid_request_error", error
        status, got = await post(s, srv, PLAIN)  # still serving
        assert status == 200 and got["usage"]["output_tokens"] == 3, got
