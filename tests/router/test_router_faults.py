"""Replicas that die, stop answering or are full, behind a real router (processes by pid).

``r0`` always answers; ``small`` holds one request at most (``--max-queue 1``: the next one
gets 503 + Retry-After) and is the one SIGSTOPped (SIGCONT in finally); ``doomed`` is killed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid

import aiohttp
import pytest

from tests.router.helpers import (HOG_TOKENS, complete, decisions, metrics, prompt, read_events,
                                  router, spawn_many, wait_idle)

LONG = {"prompt": "hold", "max_tokens": HOG_TOKENS, "ignore_eos": True, "temperature": 0}
STREAM_END_BOUND = 10.0  # seconds: a silent replica's streams end within this (liveness bound)
NEW_REQUEST_BOUND = 10.0  # seconds each new request may take meanwhile (generous, 2-core box)


@pytest.fixture(scope="module")
def fleet():
    started = spawn_many({"r0": (), "small": ("--max-queue", "1"), "doomed": ()})
    try:
        yield started
    finally:
        for srv in started.values():
            if srv.proc is not None and srv.proc.poll() is None:
                os.kill(srv.proc.pid, signal.SIGCONT)
            srv.stop(timeout=20)


async def busy(s, url) -> int:
    async with s.post(url + "/v1/kvpool/lookup", json={"prompt": "x"}) as lk:
        out = await lk.json()
    return out["num_running"] + out["num_waiting"]


async def wait_busy(s, url, n: int) -> None:
    for _ in range(400):  # bounded: 20 s
        if await busy(s, url) >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} never had {n} requests in flight")


async def post_json(s, url, body):
    async with s.post(url + "/v1/completions", json=body) as r:
        return r.status, await r.json()


async def test_killed_replica_ends_its_stream_with_an_error_event_and_json_with_502(fleet):
    doomed = fleet["doomed"]
    async with router([doomed.url], interval=3600) as (_, url), aiohttp.ClientSession() as s:
        plain = asyncio.create_task(post_json(s, url, LONG))
        async with s.post(url + "/v1/completions", json={**LONG, "stream": True}) as resp:
            assert resp.status == 200
            await resp.content.readline()  # its first event arrived: the stream runs
            await wait_busy(s, doomed.url, 2)  # and the plain request runs beside it
            os.kill(doomed.proc.pid, signal.SIGKILL)
            doomed.proc.wait(timeout=10)
            events = await asyncio.wait_for(read_events(resp), 30)
        status, body = await asyncio.wait_for(plain, 30)
    # cut off, not short: the last event before [DONE] is an OpenAI error, not a token
    assert events[-1] == "[DONE]"
    err = events[-2]["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == "replica_failed" and err["type"] == "server_error"
    assert all("choices" in e for e in events[:-2])
    assert status == 502 and body["error"]["code"] == "replica_failed"
    assert "not retried, as it may have run there" in body["error"]["message"], body


async def test_silent_replica_ends_its_streams_and_new_requests_go_elsewhere(fleet):
    """A new request sent to small before the beats found it silent may run there once it
    resumes: the 504 replica_unresponsive, never sent to r0 too (upstream.py NOTE(retry));
    the others, and every one after, are r0's."""
    small, r0 = fleet["small"], fleet["r0"]
    # the bounds below leave room for a 2 s silence (not the 5 s default), a 5 s lookup and
    # r0 serving the rest on a shared 2-core box
    async with router([small.url, r0.url], interval=0.5, down_after=2.0) as (r, url), \
            aiohttp.ClientSession() as s:
        body = {**LONG, "prompt": prompt(uuid.uuid4().hex), "max_tokens": 1500, "stream": True}
        async with s.post(url + "/v1/completions", json=body) as resp:
            assert resp.status == 200
            await resp.content.readline()
            assert r.replicas.replicas[0].in_flight == 1  # round robin's first: on small
            os.kill(small.proc.pid, signal.SIGSTOP)
            try:
                async def timed(i):
                    body = {"prompt": prompt(f"{i} {time.monotonic()}"), "max_tokens": 2}
                    return await asyncio.wait_for(post_json(s, url, body), NEW_REQUEST_BOUND)

                news = asyncio.gather(*(timed(i) for i in range(6)))
                events = await asyncio.wait_for(read_events(resp), STREAM_END_BOUND)
                took = await news
            finally:
                os.kill(small.proc.pid, signal.SIGCONT)
        assert events[-1] == "[DONE]"
        assert events[-2]["error"]["code"] == "replica_unresponsive"
        assert len(took) == 6  # every new request answered, none hung
        for status, out in took:
            assert status == 200 or (status, out["error"]["code"]) == (
                504, "replica_unresponsive"), (status, out)
        assert r.replicas.silenced >= 1
        await complete(s, url, {"prompt": prompt(uuid.uuid4().hex)})  # on r0
        await wait_idle(s, [small.url, r0.url])


async def test_full_replica_is_retried_elsewhere_and_all_full_is_503_retry_after(fleet):
    small, r0 = fleet["small"], fleet["r0"]
    async with aiohttp.ClientSession() as s:
        assert await wait_idle(s, [small.url]) == 0  # the stopped test's stream is gone
        async with s.post(small.url + "/v1/completions", json={**LONG, "stream": True}) as hog:
            assert hog.status == 200
            await hog.content.readline()  # small holds one request: it is full now
            status, direct = await post_json(s, small.url, {"prompt": "hi"})
            assert status == 503 and direct["error"]["code"] == "queue_full"
            async with router([small.url, r0.url]) as (_, url):
                await complete(s, url, {"prompt": prompt(uuid.uuid4().hex)})
                assert decisions(await metrics(s, url), "retry") == 1  # small, then r0
            async with router([small.url]) as (_, url), \
                    s.post(url + "/v1/completions", json={"prompt": "hi"}) as resp:
                out = await resp.json()
                assert resp.status == 503, out
                assert resp.headers["Retry-After"] == "1"
                assert out["error"]["code"] == "queue_full"  # the replica's own answer
        assert await wait_idle(s, [small.url]) == 0
