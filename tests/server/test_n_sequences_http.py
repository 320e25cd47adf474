"""An n > 1 request on a real server, read as vLLM's n child requests: the request gauges
count its sequences (NOTE(child-requests) in kvpool/metrics/vllm_series.py), the prefix
counters a lookup per sequence (NOTE(child-lookups) in kvpool/core/prompt_alloc.py), /health
and the lookup count as the gauges (NOTE(load-counts)); and the
HTTP series count a client that left while queued (NOTE(left-early) in
kvpool/server/http_counting.py), as vLLM's instrumentator does."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import aiohttp

from tests.server.helpers import Running, scrape

SETTLE = 10.0  # seconds a bounded wait for the server's figures may take
COMPLETIONS = "/v1/completions"
# four sequences that outlast the test's reads (it cancels them): they hold --max-num-seqs 4
HOG = {"prompt": "hold every slot", "max_tokens": 900, "ignore_eos": True, "n": 4,
       "stream": True}
CONFIG = dict(max_num_seqs=4, num_device_blocks=320, max_model_len=1024,
              max_tokens_limit=1024)


def vllm(srv: Running) -> tuple:
    """The labels of the server's vllm:* series."""
    return (("engine", "0"), ("model_name", srv.engine.model_name))


def value(m: dict, name: str, labels: tuple = ()) -> float:
    return m.get(name, {}).get(labels, 0.0)


async def scrape_when(srv: Running, check: Callable[[dict], bool]) -> dict:
    deadline = time.monotonic() + SETTLE
    while not check(got := await scrape(srv)):
        assert time.monotonic() < deadline, "the server's figures never settled"
        await asyncio.sleep(0.01)
    return got


def requests(m: dict, state: str) -> float:
    return value(m, "kvpool_requests", (("state", state),))


@contextlib.asynccontextmanager
async def hog(srv: Running) -> AsyncIterator[None]:
    """The HOG stream, running (its first chunk came) until the block ends."""
    async with aiohttp.ClientSession() as s:
        resp = await s.post(srv.url + COMPLETIONS, json=HOG)
        assert resp.status == 200
        assert (await resp.content.readline()).startswith(b"data: {")
        try:
            yield
        finally:
            resp.close()
    await scrape_when(srv, lambda m: requests(m, "running") == 0)


async def load_of(srv: Running) -> list[dict]:
    """num_running and num_waiting as GET /health and POST /v1/kvpool/lookup report them."""
    async with aiohttp.ClientSession() as s:
        async with s.get(srv.url + "/health") as r:
            health = await r.json()
        async with s.post(srv.url + "/v1/kvpool/lookup", json={"prompt": "x"}) as r:
            found = await r.json()
    return [{k: d[k] for k in ("num_running", "num_waiting")} for d in (health, found)]


async def post(url: str, body: dict) -> None:
    """A client that waits for its answer until cancelled, then leaves (its session closed)."""
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        await r.read()


async def test_running_and_waiting_count_sequences(make_server):
    async with make_server(**CONFIG) as srv, hog(srv):
        lv = vllm(srv)
        # n=2 cannot join the 4 running sequences: it waits in the scheduler
        waiter = asyncio.create_task(post(srv.url + COMPLETIONS, {"prompt": "next", "n": 2,
                                                                   "max_tokens": 2}))
        try:
            m = await scrape_when(srv, lambda m: requests(m, "waiting") == 1)
            assert requests(m, "running") == 1  # kvpool's own series count requests
            assert value(m, "vllm:num_requests_running", lv) == 4
            assert value(m, "vllm:num_requests_waiting", lv) == 2
            # /health and the lookup count as those gauges (NOTE(load-counts) in
            # kvpool/server/load_counts.py), not as kvpool_requests
            assert await load_of(srv) == [{"num_running": 4, "num_waiting": 2}] * 2
        finally:
            waiter.cancel()
            await asyncio.gather(waiter, return_exceptions=True)
        await scrape_when(srv, lambda m: value(m, "vllm:num_requests_waiting", lv) == 0)


async def test_prefix_counters_count_a_lookup_per_sequence(make_server):
    async with make_server(**CONFIG) as srv:
        lv = vllm(srv)
        before = await scrape(srv)
        body = {"prompt": list(range(100, 137)), "n": 2, "max_tokens": 1}  # 2 full blocks + 5
        async with aiohttp.ClientSession() as s, s.post(srv.url + COMPLETIONS, json=body) as r:
            assert r.status == 200
        after = await scrape_when(srv, lambda m: value(m, "vllm:prompt_tokens_total", lv)
                                  - value(before, "vllm:prompt_tokens_total", lv) == 74)

        def delta(name: str, labels: tuple) -> float:
            return value(after, name, labels) - value(before, name, labels)
        # vLLM: two children query 37 each; the second hits the first's two full blocks
        assert delta("vllm:prefix_cache_queries_total", lv) == 74
        assert delta("vllm:prefix_cache_hits_total", lv) == 32
        assert delta("kvpool_prefix_cache_queries_total", ()) == 74  # one rule for both
        assert delta("kvpool_prefix_cache_hits_total", ()) == 32


def completions(m: dict, name: str, **labels: str) -> float:
    """``name``'s sample for POST /v1/completions (``labels`` on top)."""
    key = tuple(sorted({"handler": COMPLETIONS, "method": "POST", **labels}.items()))
    return value(m, name, key)


async def test_clients_that_leave_while_queued_are_counted(make_server):
    async with make_server(**CONFIG) as srv, hog(srv):
        before = await scrape(srv)  # the hog's 200 is in: counted when its stream started
        queued = [asyncio.create_task(post(srv.url + COMPLETIONS, {"prompt": "q", **extra}))
                  for extra in ({}, {"stream": True})]
        await scrape_when(srv, lambda m: requests(m, "waiting") == 2)
        for t in queued:  # both clients give up before any answer started
            t.cancel()
        await asyncio.gather(*queued, return_exceptions=True)
        count = "http_request_duration_seconds_count"
        after = await scrape_when(srv, lambda m: completions(m, count)
                                  - completions(before, count) >= 2)
        # vLLM: an empty 200 (with_cancellation) and a stream's 200 headers, one each
        assert completions(after, "http_requests_total", status="2xx") - \
            completions(before, "http_requests_total", status="2xx") == 2
        assert completions(after, count) - completions(before, count) == 2
        size = "http_response_size_bytes_sum"  # labelled by handler only: empty bodies
        assert value(after, size, (("handler", COMPLETIONS),)) == \
            value(before, size, (("handler", COMPLETIONS),))
        await scrape_when(srv, lambda m: requests(m, "waiting") == 0)  # aborted, not run
