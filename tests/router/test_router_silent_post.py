"""A request whose replica took it and went silent (kvpool/router/upstream.py NOTE(retry)):
two real aiohttp replicas on 127.0.0.1, the first chosen (round robin's first, or the
least loaded) turning silent, the other answering everything.

A POST (a new ``/v1/responses``, a completion, a chat completion) may have run on the silent
replica: with ``store`` a Responses creation there is a stored response, and a second run
elsewhere would make two. It gets the router's 504 ``replica_unresponsive``, no Retry-After,
and no other replica is sent it. Before, the silence was retried on the next replica (both
replicas received the POST, the client got the second's 200). A GET, which may be sent
again, still goes on to the next replica. A replica found silent while the request's
connect to it still hangs never got it: the POST goes on to the next replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

import aiohttp
import pytest
from aiohttp import web

from tests.router.helpers import apps_served, recording_replica, router
from tests.router.test_router_pinned_followup import answered

LOADED_HEALTH = b'{"status": "ok", "num_running": 9, "num_waiting": 0}'
IDLE_HEALTH = b'{"status": "ok", "num_running": 0, "num_waiting": 0}'
BODIES = {"/v1/responses": {"model": "m", "input": "hi", "store": True},
          "/v1/completions": {"model": "m", "prompt": "hi"},
          "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}


def replica(name: str, got: list[str], hung: asyncio.Event | None = None) -> web.Application:
    """Answers /health (``hung`` unset: idle; always set: loaded), POSTs and GET /v1/models;
    each request but /health is appended to ``got`` as "name METHOD path" once its body is
    read. While ``hung`` is set it answers nothing at all, /health included."""
    def probe(request: web.Request) -> web.Response | None:
        if request.path == "/health" and not (hung is not None and hung.is_set()):
            body = IDLE_HEALTH if hung is not None else LOADED_HEALTH
            return web.Response(body=body, content_type="application/json")
        return None

    return recording_replica(name, got, hung, probe)


@contextlib.asynccontextmanager
async def pair():
    """The silent-to-be replica (first, idle) and a loaded live one behind a router beating
    every 0.1 s (silent after 0.3 s); yields (its URL, a session, the hang, what each got)."""
    got: list[str] = []
    hung = asyncio.Event()
    async with contextlib.AsyncExitStack() as stack:
        urls = await stack.enter_async_context(apps_served(replica("silent", got, hung),
                                                           replica("live", got)))
        stack.callback(hung.clear)  # its handlers end before its runner's cleanup
        _r, url = await stack.enter_async_context(router(
            urls, interval=0.1, down_after=0.3, policy="round_robin"))
        s = await stack.enter_async_context(aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=10)))
        yield url, s, hung, got


@pytest.mark.parametrize("path", list(BODIES))
async def test_a_post_its_replica_goes_silent_on_is_504_and_sent_nowhere_else(path):
    async with pair() as (url, s, hung, got):
        hung.set()
        async with s.post(url + path, json=BODIES[path]) as resp:
            status, headers, err = await answered(resp)
        assert status == 504 and "Retry-After" not in headers, (status, err)
        assert (err["code"], err["type"], err["param"]) == (
            "replica_unresponsive", "server_error", None), err
        assert "may have run" in err["message"], err
        assert got == [f"silent POST {path}"]  # exactly one replica received it


async def test_a_get_its_replica_goes_silent_on_goes_to_the_next():
    """A GET may be sent again (RFC 9110 9.2.1): the next replica answers it."""
    async with pair() as (url, s, hung, got):
        hung.set()
        async with s.get(url + "/v1/models") as resp:
            assert resp.status == 200, await resp.text()
        assert got == ["silent GET /v1/models", "live GET /v1/models"]


@contextlib.contextmanager
def unaccepting():
    """A 127.0.0.1 port nothing accepts on, its accept queue full: a connect to it hangs (its
    SYN dropped), so no request is ever sent there; yields its URL."""
    listener = socket.socket()
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        for _ in range(3):
            fillers.append(socket.socket())
            fillers[-1].setblocking(False)
            with contextlib.suppress(BlockingIOError):
                fillers[-1].connect(listener.getsockname())
        yield "http://127.0.0.1:%d" % listener.getsockname()[1]
    finally:
        for sock in (*fillers, listener):
            sock.close()


async def test_a_post_whose_replica_went_silent_before_it_was_sent_goes_to_the_next():
    """upstream.py NOTE(retry): the least loaded replica, taken for healthy, accepts no
    connection; the request's connect to it hangs and it is found silent then (its in-flight
    work ended as a beat finding it silent ends it: ``Replica.end_leases``; the beats are off
    here). Nothing was sent: the POST goes on to the live replica, which runs it once. Without
    wire.py's ``on_sent`` it was taken for sent: a 504."""
    got: list[str] = []
    with unaccepting() as dead:
        async with apps_served(replica("live", got)) as (live,), \
                router([dead, live], interval=3600) as (r, url), \
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s:
            stuck = r.replicas.find(dead)
            stuck.healthy = True  # as if its last beat had passed
            sent = asyncio.create_task(s.post(url + "/v1/responses",
                                              json=BODIES["/v1/responses"]))
            for _ in range(500):  # bounded: 5 s
                if stuck.leases:
                    break
                await asyncio.sleep(0.01)
            assert stuck.end_leases() == 1
            async with await sent as resp:
                assert resp.status == 200, await resp.text()
    assert got == ["live POST /v1/responses"]
