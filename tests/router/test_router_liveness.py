"""A replica is silent (its in-flight requests ended) only when nothing at all comes from it
for --down-after seconds (replicas.py NOTE(liveness)): a /health that answers late, or not at
all, while the replica still streams its answers, is not silence. Before, only a /health
answer within the beat's 0.5 s counted, so a replica whose /health stalled (SGLang's runs a
generation; a busy API loop answers late) had its working requests cut.

And a replica slow to accept a connection (its accept queue full: the kernel drops the SYN and
sends it again after 1 s, then 3 s) is waited for (wire.py NOTE(connect-timeout)); before, a
connect bound of 1 s took it for down and the request went elsewhere, or got a 503.

Replicas are real aiohttp servers on 127.0.0.1; the slow-accepting one is a plain socket with
an accept queue of one, filled, served by a thread (stopped at the end)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import select
import socket
import threading

import aiohttp
from aiohttp import web

from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import apps_served, read_events, served

EVENTS = 20  # a stream of this many events, one per TICK: several down-afters long
TICK = 0.1
DOWN_AFTER = 0.6


def stalling_replica(stall: asyncio.Event, release: asyncio.Event,
                     late: list[float]) -> web.Application:
    """Its /health stalls (until ``release``) once a stream starts, or answers ``late[0]``
    seconds late; its stream sends EVENTS events, one per TICK; a plain completion takes
    several down-afters."""

    async def health(_request):
        if stall.is_set():
            await release.wait()
        await asyncio.sleep(late[0])
        return web.json_response({"status": "ok", "num_running": 0, "num_waiting": 0})

    async def complete(request):
        body = await request.json()
        if not body.get("stream"):
            late[0] = 0.3  # each beat's answer now comes after its 0.1 s
            await asyncio.sleep(4 * DOWN_AFTER)
            return web.json_response({"object": "text_completion", "choices": []})
        stall.set()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(EVENTS):
            await resp.write(f'data: {{"choices": [{{"text": "{i}"}}]}}\n\n'.encode())
            await asyncio.sleep(TICK)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", complete)
    return app


def router_over(url: str) -> Router:
    return Router(ReplicaSet([url], interval=0.05, timeout=0.1, down_after=DOWN_AFTER),
                  policy="round_robin")


async def test_a_stream_that_progresses_outlives_a_stalled_health():
    """/health stalls for the whole stream (three down-afters and more): the stream is not
    cut, though the replica takes no new requests while its /health is late."""
    stall, release = asyncio.Event(), asyncio.Event()
    async with apps_served(stalling_replica(stall, release, [0.0])) as (rep,):
        async with served(r := router_over(rep)) as url, aiohttp.ClientSession() as s:
            try:
                async with s.post(url + "/v1/completions",
                                  json={"prompt": "x", "stream": True}) as resp:
                    assert resp.status == 200
                    events = await asyncio.wait_for(read_events(resp), 30)
                assert not r.replicas.replicas[0].healthy  # /health still stalled
            finally:
                release.set()
    assert events == [{"choices": [{"text": str(i)}]} for i in range(EVENTS)] + ["[DONE]"]
    assert r.replicas.silenced == 0


async def test_a_late_health_answer_keeps_a_long_request():
    """Every beat's answer comes after the beat's 0.1 s but well within down-after: the
    replica is heard, so its request running four down-afters ends as the replica answers."""
    async with apps_served(stalling_replica(asyncio.Event(), asyncio.Event(), [0.0])) as (rep,):
        async with served(r := router_over(rep)) as url, aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
                assert resp.status == 200, await resp.text()
                assert (await resp.json())["object"] == "text_completion"
    assert r.replicas.silenced == 0


class SlowAccepter:
    """A replica on a plain socket with an accept queue of one: while ``accepting`` is clear
    nothing is accepted, and one waiting connection fills the queue (the next SYN dropped).
    Each accepted connection gets one answer: /health a kvpool-like one, else a completion."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepting, self.stop = threading.Event(), threading.Event()
        self.accepting.set()
        self.thread = threading.Thread(target=self.serve, daemon=True)

    def serve(self) -> None:
        while not self.stop.is_set():
            if not self.accepting.is_set() or not select.select([self.sock], [], [], 0.02)[0]:
                self.stop.wait(0.02)
                continue
            conn, _ = self.sock.accept()
            with conn:
                conn.settimeout(5)
                head = conn.recv(65536)
                if not head:  # the connection that filled the queue
                    continue
                body = {"status": "ok", "num_running": 0, "num_waiting": 0} \
                    if head.startswith(b"GET /health") else {"object": "text_completion"}
                data = json.dumps(body).encode()
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(data)
                             + data)


async def test_a_replica_slow_to_accept_is_waited_for_not_taken_for_down():
    """The request's first SYN and its retry after 1 s are dropped (the queue full until
    1.5 s); the retry at 3 s connects and the replica answers."""
    acc = SlowAccepter()
    acc.thread.start()
    try:
        r = Router(ReplicaSet([acc.url], interval=3600), policy="round_robin")
        async with served(r) as url, aiohttp.ClientSession() as s:
            assert r.replicas.healthy() == r.replicas.replicas
            acc.accepting.clear()
            await asyncio.sleep(0.1)  # the thread is between looks, not in an accept
            filler = socket.create_connection(("127.0.0.1", int(acc.url.rsplit(":", 1)[1])))
            post = asyncio.create_task(s.post(url + "/v1/completions", json={"prompt": "x"}))
            await asyncio.sleep(1.5)
            filler.close()
            acc.accepting.set()
            async with await asyncio.wait_for(post, 30) as resp:
                assert resp.status == 200, await resp.text()
                assert (await resp.json())["object"] == "text_completion"
    finally:
        acc.stop.set()
        acc.thread.join(10)
        with contextlib.suppress(OSError):
            acc.sock.close()
