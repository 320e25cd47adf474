"""The answer's ``id`` follows vLLM 0.33 (X-Request-Id, else the body's ``request_id``, else
random), while each engine request keeps an id of its own (NOTE(own-engine-id) in
kvpool/server/request_ids.py): real servers on 127.0.0.1, and kvpool router in front of one.

Two streams sent with the same id are held in the engine together (their steps wait for
permits, a FaultPlan, as in test_dev_routes.py), so they overlap whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading

import aiohttp

from kvpool.runtime.faults import FaultPlan
from kvpool.server.app import build_app
from tests.configs import SERVE_LIMITS, engine_config
from tests.router.helpers import router
from tests.server.helpers import Running, wait_free, wait_until

HEX32 = re.compile(r"[0-9a-f]{32}")
CHAT = [{"role": "user", "content": "hello there"}]


async def post(s, url, body, headers=None):
    """(status, body JSON, X-Request-Id) of one non-streamed answer."""
    async with s.post(url, json=body, headers=headers or {}) as r:
        return r.status, await r.json(), r.headers.get("X-Request-Id")


async def stream_ids(s, url, body, headers=None):
    """(every chunk's id, the joined text, X-Request-Id) of one streamed answer."""
    ids, text = [], []
    async with s.post(url, json={**body, "stream": True}, headers=headers or {}) as r:
        assert r.status == 200, await r.text()
        raw = (await r.read()).decode()
        echoed = r.headers["X-Request-Id"]
    for event in raw.split("\n\n"):
        if not event or event == "data: [DONE]":
            continue
        assert event.startswith("data: ") and "\n" not in event and "\r" not in event, event
        chunk = json.loads(event[len("data: "):])
        ids.append(chunk["id"])
        text += [c.get("text") or (c.get("delta") or {}).get("content") or ""
                 for c in chunk["choices"]]
    return ids, "".join(text), echoed


async def test_the_id_is_the_header_else_the_body_request_id_else_random(srv):
    comp, chat = srv.v1 + "/completions", srv.v1 + "/chat/completions"
    body = {"prompt": "hi", "max_tokens": 2}
    cbody = {"messages": CHAT, "max_tokens": 2}
    async with aiohttp.ClientSession() as s:
        _, out, echoed = await post(s, comp, body, {"X-Request-Id": "trace-7"})
        assert out["id"] == "cmpl-trace-7" and echoed == "trace-7"
        _, out, echoed = await post(s, chat, cbody, {"X-Request-Id": "trace-7"})
        assert out["id"] == "chatcmpl-trace-7" and echoed == "trace-7"
        _, out, echoed = await post(s, comp, {**body, "request_id": "mine-1"})
        assert out["id"] == "cmpl-mine-1" and HEX32.fullmatch(echoed)  # vLLM: a random header
        _, out, _ = await post(s, chat, {**cbody, "request_id": "mine-1"},
                               {"X-Request-Id": "gw-9"})
        assert out["id"] == "chatcmpl-gw-9"  # the gateway's header wins, as in vLLM
        for extra in ({}, {"request_id": None}):
            _, out, echoed = await post(s, comp, {**body, **extra})
            assert HEX32.fullmatch(echoed) and out["id"] == "cmpl-" + echoed
        _, out, _ = await post(s, comp, {**body, "request_id": ""})
        assert out["id"] == "cmpl-"  # vLLM takes "" too
        for url, b in ((comp, body), (chat, cbody)):  # read, no longer listed as ignored
            async with s.post(url, json={**b, "request_id": "m"}) as r:
                assert r.status == 200 and "X-Kvpool-Ignored-Fields" not in r.headers
        ids, _, echoed = await stream_ids(
            s, chat, {**cbody, "stream_options": {"include_usage": True}},
            {"X-Request-Id": "trace-8"})
        assert echoed == "trace-8" and len(ids) >= 3 and set(ids) == {"chatcmpl-trace-8"}
        ids, _, _ = await stream_ids(s, comp, {**body, "request_id": "mine-2"})
        assert set(ids) == {"cmpl-mine-2"}
        ids, _, echoed = await stream_ids(s, comp, body)
        assert set(ids) == {"cmpl-" + echoed}
        # vLLM's Messages API answers through its chat: the same id
        _, out, _ = await post(s, srv.v1 + "/messages", {**cbody, "model": srv.engine.model_name},
                               {"X-Request-Id": "trace-9"})
        assert out["id"] == "chatcmpl-trace-9", out


async def test_hostile_ids_never_reach_a_header_and_bad_ones_are_400s(srv):
    comp = srv.v1 + "/completions"
    body = {"prompt": "hi", "max_tokens": 2}
    async with aiohttp.ClientSession() as s:
        evil = "a\r\nX-Evil: 1\r\n\r\n<b>\u00e9\u0000"
        for stream in (False, True):
            async with s.post(comp, json={**body, "request_id": evil, "stream": stream}) as r:
                raw = await r.read()
                assert r.status == 200 and "X-Evil" not in r.headers
                assert HEX32.fullmatch(r.headers["X-Request-Id"])
                assert b"\r" not in raw and b"X-Evil: 1\n" not in raw
        _, out, _ = await post(s, comp, {**body, "request_id": evil})
        assert out["id"] == "cmpl-" + evil  # as sent: JSON escapes it
        wide = "\u0438\u0434-\U0001f389"
        _, out, _ = await post(s, comp, {**body, "request_id": wide})
        assert out["id"] == "cmpl-" + wide
        _, out, _ = await post(s, comp, {**body, "request_id": "r" * 256})
        assert out["id"] == "cmpl-" + "r" * 256
        for bad in ("r" * 257, 5, [], {"a": 1}, True):
            status, out, _ = await post(s, comp, {**body, "request_id": bad})
            assert status == 400 and out["error"]["param"] == "request_id", out
            assert set(out["error"]) == {"message", "type", "param", "code"}
        # a header the server cannot echo (too long, a space): a fresh id, the same in both
        for value in ("x" * 300, "a b"):
            _, out, echoed = await post(s, comp, body, {"X-Request-Id": value})
            assert HEX32.fullmatch(echoed) and out["id"] == "cmpl-" + echoed


async def test_a_non_ascii_header_is_not_echoed():
    """Raw bytes on the wire (a client library would refuse to send them)."""
    from kvpool.runtime.engine.async_engine import AsyncEngine
    from aiohttp.test_utils import TestServer

    engine = AsyncEngine(engine_config("serve", **SERVE_LIMITS, max_tokens_limit=64))
    server = TestServer(build_app(engine, engine_shutdown_timeout=5.0), host="127.0.0.1",
                        port=0)
    await server.start_server(shutdown_timeout=5.0)
    try:
        payload = json.dumps({"prompt": "hi", "max_tokens": 1}).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     b"X-Request-Id: \xc3\xa9t\xc3\xa9\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
        raw = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        head, _, rest = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), raw[:200]
        echoed = re.search(rb"\r\nX-Request-Id: ([^\r\n]*)", head).group(1).decode()
        assert HEX32.fullmatch(echoed)
        assert json.loads(rest)["id"] == "cmpl-" + echoed
    finally:
        await server.close()


class Permits(FaultPlan):
    """While closed, each engine step waits for a permit (bounded: never hangs a test)."""

    def __init__(self) -> None:
        self.sem = threading.Semaphore(0)
        self.opened = threading.Event()
        self.opened.set()
        self.seen: set[str] = set()  # every engine request id stepped

    def on_step(self, request_id: str) -> None:
        self.seen.add(request_id)
        if not self.opened.is_set():
            self.sem.acquire(timeout=10)


@contextlib.asynccontextmanager
async def held_server(permits: Permits):
    from aiohttp.test_utils import TestServer

    from kvpool.runtime.engine.async_engine import AsyncEngine

    engine = AsyncEngine(engine_config("serve", **SERVE_LIMITS, max_tokens_limit=256),
                         faults=permits)
    server = TestServer(build_app(engine, engine_shutdown_timeout=5.0), host="127.0.0.1",
                        port=0)
    await server.start_server(shutdown_timeout=5.0)
    run = Running(f"http://127.0.0.1:{server.port}", engine, server.app, server)
    baseline = run.free()
    try:
        yield run
        await wait_free(run, baseline)
        assert run.free() == baseline, "device blocks still in use after the test"
    finally:
        await server.close()


async def run_together(srv: Running, permits: Permits, count: int, make) -> list:
    """Grant steps one at a time until ``count`` requests run in the engine at once."""
    sched = srv.engine.core.scheduler
    tasks = [asyncio.create_task(make(i)) for i in range(count)]
    while sched.num_requests()["running"] < count:
        assert not any(t.done() for t in tasks), [t.result() for t in tasks if t.done()]
        permits.sem.release()
        await asyncio.sleep(0.02)
    return tasks


PROMPTS = ("the cat sat on the mat and then", "blocks of the paged kv cache hold")


async def test_one_id_on_concurrent_streams_each_runs_its_own_request():
    """Three streams with one X-Request-Id run at once; the third's client leaves (its
    request aborted); the other two finish with the texts they give alone."""
    permits = Permits()
    bodies = [{"prompt": p, "max_tokens": 24, "ignore_eos": True, "temperature": 0}
              for p in PROMPTS]
    same = {"X-Request-Id": "same-id"}
    async with held_server(permits) as srv, aiohttp.ClientSession() as s:
        url = srv.v1 + "/completions"
        alone = [(await stream_ids(s, url, b))[1] for b in bodies]
        assert alone[0] != alone[1]
        permits.seen.clear()
        permits.opened.clear()
        tasks = await run_together(srv, permits, 3,
                                   lambda i: stream_ids(s, url, bodies[i % 2], same))
        tasks[2].cancel()  # the client leaves: the server aborts that one request only
        sched = srv.engine.core.scheduler
        while sched.num_requests()["running"] > 2:
            permits.sem.release()
            await asyncio.sleep(0.02)
        assert sched.num_requests()["running"] == 2  # the other two still run
        permits.opened.set()
        permits.sem.release(1000)
        for task, want in zip(tasks[:2], alone):
            ids, text, echoed = await task
            assert set(ids) == {"cmpl-same-id"} and echoed == "same-id" and text == want
        assert len(permits.seen) == 3 and "cmpl-same-id" not in permits.seen


async def test_the_router_keeps_the_replicas_id(make_server):
    """kvpool router forwards X-Request-Id and relays the replica's answer: the id shown is
    the replica's, whether the client sent one or not."""
    async with make_server() as srv, router([srv.url]) as (_, url), \
            aiohttp.ClientSession() as s:
        body = {"prompt": "hi", "max_tokens": 2}
        for _ in range(50):  # the router's first health probe marks the replica up
            status, out, echoed = await post(s, url + "/v1/completions", body,
                                             {"X-Request-Id": "via-router"})
            if status == 200:
                break
            await asyncio.sleep(0.1)
        assert out["id"] == "cmpl-via-router" and echoed == "via-router"
        status, out, echoed = await post(s, url + "/v1/completions", body)
        assert status == 200 and HEX32.fullmatch(echoed) and out["id"] == "cmpl-" + echoed
        ids, _, echoed = await stream_ids(s, url + "/v1/chat/completions",
                                          {"messages": CHAT, "max_tokens": 2,
                                           "request_id": "body-id"})
        assert set(ids) == {"chatcmpl-body-id"} and HEX32.fullmatch(echoed)
