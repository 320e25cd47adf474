"""The client's model put back in the answers to a rewritten request (``kvpool epp
--model-rewrites``; kvpool/epp/restore.py NOTE(model-restore), service.py NOTE(answer-phase);
docs/epp.md, "Model rewrite and traffic splitting") through a real Envoy running the shipped
deploy/envoy/envoy.yaml (bench/envoy_proc.py, stopped by pid), the real picker and a real
aiohttp replica on 127.0.0.1 answering with the target model: JSON answers, SSE streams cut
mid-event, the Responses API's nested ``response.model``. Before, the client read the target.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import aiohttp
import pytest
from aiohttp import web

from bench.envoy_proc import Envoy
from kvpool.epp.cli import picking
from kvpool.epp.picker import Picker
from kvpool.epp.restore import JSON, SSE, ModelRestore
from kvpool.epp.rewrite import parse_rewrites
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.epp.test_epp_envoy_protocol import RESPONSE_PHASES, ROUTE_ANSWERS
from tests.epp.test_epp_model_rewrite import BUFFERED
from tests.router.helpers import LOOKUP_TIMEOUT, apps_served
from tests.router.test_router_hostile_replica import answering_replica

ASKED, TARGET = "food-review", "food-review-v2"
RULES = {"rules": [{"matches": [{"model": {"value": ASKED}}],
                    "targets": [{"modelRewrite": TARGET}]}]}
TRICKY = f'the text says "model": "{TARGET}"'  # inside a string: never touched
ANSWERS_SKIPPED = (ROUTE_ANSWERS, ROUTE_ANSWERS.replace("SEND", "SKIP").replace("STREAMED",
                                                                                 "NONE"))


def events(model: str, path: str) -> list[dict]:
    if path == "/v1/responses":
        return [{"type": "response.created", "sequence_number": 0, "response": {
                    "id": "resp_1", "object": "response", "instructions": TRICKY,
                    "model": model}},
                {"type": "response.output_text.delta", "delta": TRICKY},
                {"type": "response.completed", "response": {"id": "resp_1", "model": model}}]
    if path == "/v1/messages":  # Anthropic's: the model is message_start's message's
        return [{"type": "message_start", "message": {"id": "m1", "type": "message",
                                                      "content": [], "model": model}},
                {"type": "content_block_delta", "index": 0,
                 "delta": {"type": "text_delta", "text": TRICKY}},
                {"type": "message_stop"}]
    return [{"id": "c1", "object": "chunk", "created": 1, "model": model,
             "choices": [{"index": 0, "text": TRICKY + "é" * i}]} for i in range(3)]


def sse(model: str, path: str) -> bytes:
    """The stream: LF events, a CRLF one with an event line, [DONE]."""
    evs = events(model, path)
    out = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in evs[:-1])
    return out + b"event: last\r\ndata: " + json.dumps(evs[-1]).encode() + b"\r\n\r\n" \
        + b"data: [DONE]\n\n"


def replica(read_first: asyncio.Event) -> web.Application:
    """Answers with the model it got; a stream is written in 7-byte pieces (cut mid-event),
    the last event only once the client has read the first (``read_first``)."""
    async def answer(request):
        body = json.loads(await request.read())
        model, path = body["model"], request.path
        if not body.get("stream"):
            return web.json_response({"id": "x", "object": "answer", "model": model,
                                      "choices": [{"text": TRICKY}], "pad": "p" * body["pad"]})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        raw = sse(model, path)
        last = raw.index(b"event: last")
        for i in range(0, len(raw), 7):
            if i <= last < i + 7:
                await asyncio.wait_for(read_first.wait(), 10)
            await resp.write(raw[i:i + 7])
            await asyncio.sleep(0.002)
        return resp

    return answering_replica(answer, "/v1/completions", "/v1/chat/completions",
                             "/v1/responses")


@contextlib.asynccontextmanager
async def gateway(workdir, edits=()):
    """The replica, the picker with RULES and Envoy; yields (Envoy URL, the first-read event,
    the picker's stop)."""
    read_first = asyncio.Event()
    async with contextlib.AsyncExitStack() as stack:
        (url,) = await stack.enter_async_context(apps_served(replica(read_first)))
        picker = Picker(Router(ReplicaSet([url], interval=3600), lookup_timeout=LOOKUP_TIMEOUT),
                        parse_rewrites(RULES))
        served = contextlib.AsyncExitStack()
        port = await served.enter_async_context(picking(picker, "127.0.0.1", 0))
        stack.push_async_callback(served.aclose)
        envoy = Envoy(port, workdir, edits)
        await asyncio.to_thread(envoy.start)
        stack.push_async_callback(asyncio.to_thread, envoy.stop)
        yield envoy.url, read_first, served.aclose


async def streamed(s, url: str, path: str, model: str, read_first: asyncio.Event) -> bytes:
    """The stream's bytes; ``read_first`` set once its first event came (the replica holds
    its last event until then: a picker that held the stream would never see it)."""
    got = b""
    async with s.post(url + path, json={"model": model, "stream": True},
                      timeout=aiohttp.ClientTimeout(total=20)) as r:
        assert r.status == 200 and "content-length" not in r.headers, r.headers
        async for piece in r.content.iter_any():
            got += piece
            if b"\n\n" in got:
                read_first.set()
    read_first.clear()
    return got


@pytest.mark.parametrize("edits", [(), (BUFFERED,), (RESPONSE_PHASES,)],
                         ids=["full_duplex", "buffered", "answers_in_full_duplex"])
async def test_answers_name_the_model_the_client_asked_for(tmp_path, edits):
    async with gateway(tmp_path, edits) as (url, read_first, _), aiohttp.ClientSession() as s:
        for path in ("/v1/completions", "/v1/chat/completions", "/v1/responses"):
            for pad in (0, 300_000):  # a large answer is restored on a worker thread
                async with s.post(url + path, json={"model": ASKED, "pad": pad}) as r:
                    out = await r.json()
                assert (out["model"], out["choices"][0]["text"], len(out["pad"])) == (
                    ASKED, TRICKY, pad), (path, out["model"])
            got = await streamed(s, url, path, ASKED, read_first)
            assert got == sse(ASKED, path), (path, got)
        # a model no rule matches: the answer byte for byte as the replica wrote it
        assert await streamed(s, url, "/v1/completions", "other", read_first) == \
            sse("other", "/v1/completions")


async def test_a_config_that_skips_the_answers_is_said_once(tmp_path, caplog):
    caplog.set_level(logging.WARNING, "kvpool.epp")
    async with gateway(tmp_path, (ANSWERS_SKIPPED,)) as (url, _, _stop), \
            aiohttp.ClientSession() as s:
        for _ in range(3):
            async with s.post(url + "/v1/completions", json={"model": ASKED, "pad": 0}) as r:
                assert (await r.json())["model"] == TARGET  # the answer is not seen
    said = [r.getMessage() for r in caplog.records if "target model" in r.getMessage()]
    assert len(said) == 1 and "response_body_mode: STREAMED" in said[0], said


async def test_a_stop_lets_the_answers_in_flight_go_on(tmp_path):
    """The picker stops while a stream it restores is half sent: the call ends OK and Envoy
    sends the rest on unprocessed (the target model from there), the stream whole. Before
    (NOTE(answer-phase)'s ``let_answers_go``) the stop waited its grace, then cut the call."""
    path, got = "/v1/chat/completions", b""
    async with gateway(tmp_path) as (url, read_first, stop), aiohttp.ClientSession() as s:
        async with s.post(url + path, json={"model": ASKED, "stream": True},
                          timeout=aiohttp.ClientTimeout(total=20)) as r:
            async for piece in r.content.iter_any():
                got += piece
                if b"\n\n" in got and not read_first.is_set():
                    await asyncio.wait_for(stop(), 4)  # not the 5 s grace
                    read_first.set()
    assert r.status == 200 and got.startswith(sse(ASKED, path)[:got.index(b"\n\n")]), got
    assert got.endswith(b"data: [DONE]\n\n") and f'"model": "{TARGET}"'.encode() in got, got
    assert got.replace(f'"model": "{TARGET}"'.encode(), f'"model": "{ASKED}"'.encode()) == \
        sse(ASKED, path)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
def test_every_cut_of_a_stream_restores_the_same_bytes(path):
    raw, want = sse(TARGET, path), sse(ASKED, path)
    for cut in range(len(raw)):
        for second in (cut, min(len(raw), cut + 5)):
            r = ModelRestore(ASKED, TARGET, SSE, 1 << 20)
            out = r.feed(raw[:cut], False) + r.feed(raw[cut:second], False)
            assert out + r.feed(raw[second:], True) == want, (cut, second)


def test_a_json_answer_is_held_only_up_to_its_model_and_bounded():
    body = json.dumps({"id": "x", "model": TARGET, "text": TRICKY}).encode()
    r = ModelRestore(ASKED, TARGET, JSON, 1 << 20)
    head = body.index(b'"text"')
    assert r.feed(body[:head], False) == body[:head].replace(TARGET.encode(), ASKED.encode())
    assert r.feed(body[head:], False) == body[head:]  # the rest goes on as it comes
    late = ModelRestore(ASKED, TARGET, JSON, 64)  # no model within the limit: as it is
    big = json.dumps({"pad": "p" * 100, "model": TARGET}).encode()
    assert late.feed(big[:80], False) == big[:80] and late.feed(big[80:], True) == big[80:]
    endless = ModelRestore(ASKED, TARGET, SSE, 64)  # no blank line within the limit
    assert endless.feed(b"data: " + b"x" * 80, False) == b"data: " + b"x" * 80
