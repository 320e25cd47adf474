"""A client that goes away -- mid-stream, mid-request, while queued, 1,000 times at random --
has its request aborted and its blocks back in the pool at once (real server, real engine)."""

from __future__ import annotations

import asyncio
import random
import time

import aiohttp

from tests.server.helpers import generated_tokens, wait_free, wait_until

LONG = {"prompt": "A paged key value cache stores the attention keys and values",
        "max_tokens": 200, "ignore_eos": True, "temperature": 0}


async def test_disconnect_mid_stream_frees_blocks(srv):
    baseline = srv.free()
    before = await generated_tokens(srv)
    session = aiohttp.ClientSession()
    try:
        resp = await session.post(srv.url + "/v1/completions", json={**LONG, "stream": True})
        assert resp.status == 200
        line = await resp.content.readline()  # the first chunk: the request is running
        assert line.startswith(b"data: {")
        assert srv.free() < baseline
        resp.close()  # drop the connection mid-stream
    finally:
        await session.close()
    took = await wait_free(srv, baseline, timeout=5)
    assert srv.free() == baseline, f"blocks not back after {took:.2f}s"
    # aborted, not run to completion: far fewer than max_tokens were generated
    assert await generated_tokens(srv) - before < LONG["max_tokens"]


async def test_disconnect_mid_request_frees_blocks(srv):
    baseline = srv.free()
    before = await generated_tokens(srv)
    async with aiohttp.ClientSession() as session:
        task = asyncio.create_task(session.post(srv.url + "/v1/completions", json=LONG))
        assert await wait_until(lambda: srv.free() < baseline, timeout=10)  # it holds blocks
        task.cancel()  # the client gives up: aiohttp closes the connection
        try:
            await task
        except asyncio.CancelledError:
            pass
    took = await wait_free(srv, baseline, timeout=5)
    assert srv.free() == baseline, f"blocks not back after {took:.2f}s"
    assert await generated_tokens(srv) - before < LONG["max_tokens"]


async def test_disconnect_while_queued(make_server):
    async with make_server(max_num_seqs=1) as srv:
        baseline = srv.free()
        async with aiohttp.ClientSession() as session:
            running = asyncio.create_task(
                session.post(srv.url + "/v1/completions", json={**LONG, "max_tokens": 100}))
            assert await wait_until(lambda: srv.free() < baseline, timeout=10)
            queued = asyncio.create_task(session.post(srv.url + "/v1/completions", json=LONG))
            await asyncio.sleep(0.05)
            queued.cancel()  # leaves while waiting for a slot: never admitted, nothing held
            resp = await running
            assert resp.status == 200 and (await resp.json())["usage"]["completion_tokens"] == 100
            try:
                await queued
            except asyncio.CancelledError:
                pass
        assert await wait_free(srv, baseline, timeout=5) < 5


async def _one(session: aiohttp.ClientSession, url: str, rng: random.Random,
               tally: dict[str, int]) -> None:
    kind = rng.choice(("complete", "complete", "stream", "drop_stream", "drop_request"))
    body = {"prompt": f"request {rng.randrange(10**6)}", "temperature": 0.7,
            "seed": rng.randrange(1000), "max_tokens": rng.randint(1, 4)}
    if kind.startswith("drop"):
        body.update(max_tokens=64, ignore_eos=True)
    if "stream" in kind:
        body["stream"] = True
    if kind == "drop_request":
        try:
            await asyncio.wait_for(session.post(url, json=body), timeout=rng.uniform(0, 0.03))
            tally["finished_before_drop"] += 1
        except asyncio.TimeoutError:
            tally["dropped"] += 1
        return
    async with session.post(url, json=body) as resp:
        if resp.status == 503:
            tally["busy"] += 1
            return
        assert resp.status == 200, await resp.text()
        if kind == "drop_stream":
            await resp.content.readline()
            resp.close()
            tally["dropped"] += 1
            return
        data = await resp.read()
        if kind == "stream":
            assert data.endswith(b"data: [DONE]\n\n")
        tally["completed"] += 1


async def test_thousand_requests_with_random_disconnects_leak_nothing(make_server):
    async with make_server(num_device_blocks=128, max_num_seqs=32, max_queue=1024) as srv:
        baseline = srv.free()
        rng = random.Random(7)
        tally = dict(completed=0, dropped=0, busy=0, finished_before_drop=0)
        sem = asyncio.Semaphore(32)
        url = srv.url + "/v1/completions"
        t0 = time.monotonic()
        conn = aiohttp.TCPConnector(limit=32)
        async with aiohttp.ClientSession(connector=conn) as session:
            async def guarded(seed: int) -> None:
                async with sem:
                    await _one(session, url, random.Random(seed), tally)

            await asyncio.gather(*(guarded(rng.randrange(2**32)) for _ in range(1000)))
        took = await wait_free(srv, baseline, timeout=10)
        elapsed = time.monotonic() - t0
        assert srv.free() == baseline, (tally, f"{baseline - srv.free()} blocks leaked")
        assert sum(tally.values()) == 1000 and tally["busy"] == 0, tally
        assert tally["completed"] >= 300 and tally["dropped"] >= 100, tally
        assert srv.engine.is_healthy()
        print(f"1000 requests in {elapsed:.1f}s, drained in {took:.3f}s: {tally}")
