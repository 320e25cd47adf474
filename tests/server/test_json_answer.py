"""A huge non-streamed answer's JSON is written in slices with the event loop free between
them (json_answer.py NOTE(encode-slices)), in the very bytes one ``json.dumps`` writes.

The ordering test waits, on the loop the in-process server shares, until the handler is
writing the answer (``OpenAIRoutes.encoding``), then asks /health: an encode that held the
loop would never let that check run mid-encode, and /health would answer after it."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

import kvpool.server.json_answer as answer_module
from kvpool.server.app import ROUTES_KEY
from kvpool.server.json_answer import INLINE_WEIGHT, SLICE_WEIGHT, json_answer, weight

TOP = 100  # top_logprobs: ~500 weight a token, so 4 x 60 tokens weigh ~120k (~60 turns)


def _odd_bodies() -> list:
    """Bodies past INLINE_WEIGHT with every shape the slicing must get right."""
    entry = {"token": "\u00e9", "logprob": -0.5, "bytes": [195, 169],
             "top_logprobs": [{"token": "a\ud800", "logprob": float("-inf"), "bytes": []}] * 9}
    return [
        {"choices": [{"index": i, "logprobs": {"content": [entry] * 400}} for i in range(3)]},
        [None] + [{"7": {"logprob": float("nan"), "rank": 1, "decoded_token": "\n"}}] * 9000,
        {"ids": tuple(range(40000)), "empty": [], "obj": {}, "s": "\u4e2d\"\\" * 100},
        {1: list(range(30000)), None: True, "k": [[list(range(SLICE_WEIGHT * 2))]]},
        [[[i, [i, {"x": i}]] for i in range(9000)], "tail", 3.5, None, False],
    ]


@pytest.mark.parametrize("body", _odd_bodies(), ids=["chat", "prompt", "tuple", "keys", "nest"])
async def test_sliced_answer_has_json_responses_bytes_and_headers(body):
    assert weight(body, INLINE_WEIGHT) > INLINE_WEIGHT  # the sliced way runs
    headers = {"X-Test": "1"}
    got, want = await json_answer(body, headers), web.json_response(body, headers=headers)
    assert got.body == want.body == json.dumps(body).encode()
    assert got.headers == want.headers


async def test_small_answer_is_json_response():
    body = {"choices": [{"index": 0, "text": "hi", "logprobs": None}]}
    assert weight(body, INLINE_WEIGHT) <= INLINE_WEIGHT
    assert (await json_answer(body)).body == web.json_response(body).body


async def test_health_answers_while_a_huge_answer_is_encoded(make_server):
    async with make_server(max_logprobs=TOP) as srv, aiohttp.ClientSession() as s:
        routes = srv.app[ROUTES_KEY]
        ask = {"model": srv.engine.model_name, "n": 4, "max_tokens": 60, "ignore_eos": True,
               "logprobs": True, "top_logprobs": TOP,
               "messages": [{"role": "user", "content": "hi"}]}

        async def big() -> tuple[bytes, str]:
            async with s.post(srv.v1 + "/chat/completions", json=ask) as r:
                assert r.status == 200
                return await r.read(), r.headers["Content-Type"]

        task = asyncio.create_task(big())
        # wait until the handler writes the answer; one encode on the loop never lets this
        # check run mid-encode
        while not task.done() and routes.encoding == 0:
            await asyncio.sleep(0)
        async with s.get(srv.url + "/health") as r:
            assert r.status == 200
        assert not task.done(), "the answer was written before /health: the loop was held"
        raw, content_type = await task
    body = json.loads(raw)
    assert weight(body, INLINE_WEIGHT) > INLINE_WEIGHT  # it took the sliced way
    assert raw == json.dumps(body).encode()  # json.dumps' own text, byte for byte
    assert content_type == "application/json; charset=utf-8"
    assert routes.encoding == 0



def test_weighing_nested_lists_visits_about_cap_values(monkeypatch):
    """NOTE(weigh-once): one-item lists 22 deep (each child weighed twice per level before:
    2**22 calls) and pairs 22 deep (2**22 leaves) weigh in a bounded number of calls."""
    one: list = [1]
    pairs: list = [1, 1]
    for _ in range(22):
        one, pairs = [one], [pairs, pairs]
    calls = 0

    def counted(value, cap, depth=0):
        nonlocal calls
        calls += 1
        return weight(value, cap, depth)

    monkeypatch.setattr(answer_module, "weight", counted)  # the recursion's own name
    assert counted(one, INLINE_WEIGHT) == 24  # 23 lists and the 1
    assert counted(pairs, INLINE_WEIGHT) > INLINE_WEIGHT
    assert calls < 4 * INLINE_WEIGHT
