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
from kvpool.server.json_answer import (INLINE_WEIGHT, SLICE_WEIGHT, bytes_answer, json_encoded,
                                       weight)
from kvpool.server.responses_api import RESPONSES_KEY
from tests.server.helpers import wait_until

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
    got = bytes_answer(await json_encoded(body), headers)
    want = web.json_response(body, headers=headers)
    assert got.body == want.body == json.dumps(body).encode()
    assert got.headers == want.headers


async def test_small_answer_is_json_response():
    body = {"choices": [{"index": 0, "text": "hi", "logprobs": None}]}
    assert weight(body, INLINE_WEIGHT) <= INLINE_WEIGHT
    assert bytes_answer(await json_encoded(body)).body == web.json_response(body).body


@pytest.mark.parametrize("body", [{"a": "\u00e9", "b": [1.5, None]}, _odd_bodies()[0]],
                         ids=["light", "heavy"])
async def test_encoded_bytes_answer_as_json_response(body):
    """responses_api.py NOTE(store-slices) stores ``json_encoded``'s bytes and answers them:
    json.dumps' bytes, json_response's headers."""
    raw = await json_encoded(body)
    got, want = bytes_answer(raw, {"X-Test": "1"}), web.json_response(body, headers={"X-Test": "1"})
    assert raw == got.body == want.body == json.dumps(body).encode()
    assert got.headers == want.headers


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


def _big(srv, tokens: int, **more) -> dict:
    """A Responses request whose answer is past INLINE_WEIGHT (stored: OpenAI's default)."""
    return {"model": srv.engine.model_name, "input": "hi", "max_output_tokens": tokens,
            "ignore_eos": True, "include": ["message.output_text.logprobs"],
            "top_logprobs": TOP, **more}


async def _post(s: aiohttp.ClientSession, url: str, body: dict) -> tuple[bytes, str]:
    async with s.post(url, json=body) as r:
        assert r.status == 200, await r.text()
        return await r.read(), r.headers["Content-Type"]


async def _turns(holds) -> int:
    """The loop turns this test gets while ``holds()``: what any other request gets too."""
    turns = 0
    while holds():
        turns += 1
        await asyncio.sleep(0)
    return turns


async def test_a_stored_response_is_written_in_slices_and_answered_with_its_bytes(make_server):
    """responses_api.py NOTE(store-slices): the loop runs other work while a heavy stored
    response's JSON is written (once stored whole on the loop before the answer's encode
    began); it is stored before the answer goes out, as the very bytes answered, json.dumps';
    a client that leaves mid-write still has it stored."""
    async with make_server(max_logprobs=TOP, server_options={"handler_cancellation": True}) \
            as srv, aiohttp.ClientSession() as s:
        routes, store = srv.app[ROUTES_KEY], srv.app[RESPONSES_KEY].store
        task = asyncio.create_task(_post(s, srv.v1 + "/responses", _big(srv, 40, request_id="r1")))
        await _turns(lambda: not task.done() and routes.encoding == 0)  # the body is made
        assert await _turns(lambda: store.get("", "r1") is None) > 2, "written whole"
        raw, content_type = await task
        body = json.loads(raw)
        assert weight(body, INLINE_WEIGHT) > INLINE_WEIGHT  # it took the sliced way
        assert raw == json.dumps(body).encode() == store.get("", "r1").raw
        assert content_type == "application/json; charset=utf-8"
        async with s.get(f"{srv.v1}/responses/r1") as r:
            assert await r.read() == raw
        task = asyncio.create_task(_post(s, srv.v1 + "/responses", _big(srv, 60, request_id="r2")))
        await _turns(lambda: not task.done() and routes.encoding == 0)
        task.cancel()  # the client leaves: the server cancels its handler
        await _turns(lambda: routes.encoding)
        assert store.get("", "r2") is None, "the handler ended after the write: no leaving"
        assert await wait_until(lambda: store.get("", "r2") is not None)
        left = store.get("", "r2").raw
        assert left == json.dumps(json.loads(left)).encode()


async def test_a_cancel_while_a_background_run_is_stored_finds_it_finished(make_server):
    """responses_background.py NOTE(background): a non-streamed run's finished object is
    written in slices once its engine request ended; a cancel meanwhile waits for it and
    cancels nothing, as after the end (the run once stored in the step its last update came
    in)."""
    async with make_server(max_logprobs=TOP) as srv, aiohttp.ClientSession() as s:
        gate, route = srv.app[ROUTES_KEY].gate, srv.app[RESPONSES_KEY]
        raw, _ = await _post(s, srv.v1 + "/responses", _big(srv, 40, background=True))
        key = ("", json.loads(raw)["id"])
        await _turns(lambda: route.background.get(key) is not None and not gate.live)
        await _turns(lambda: gate.live)  # the engine request ended
        assert route.background.get(key) is not None, "stored in the step the end came in"
        assert await route.background.cancel(key) is None  # it had ended: nothing cancelled
        stored = route.store.get(*key).raw
        body = json.loads(stored)
        assert body["status"] == "incomplete"  # max_output_tokens' end, not cancelled
        assert weight(body, INLINE_WEIGHT) > INLINE_WEIGHT  # it took the sliced way
        assert stored == json.dumps(body).encode()
        async with s.post(f"{srv.v1}/responses/{key[1]}/cancel") as r:
            assert r.status == 400  # a finished response
        async with s.get(f"{srv.v1}/responses/{key[1]}") as r:
            assert await r.read() == stored


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
