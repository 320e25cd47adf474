"""NOTE(keep-alive) in sse_answer.py: vLLM's --sse-keep-alive-interval. A stream that waits
(here: queued behind the one sequence slot) gets the comment ``: keep-alive`` each idle
interval, before its first event, and then its whole answer as usual; ``idle_marked`` marks
the idle intervals of any async source without losing or reordering an item."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from kvpool.server.sse_answer import IDLE, KEEP_ALIVE, idle_marked
from tests.server.helpers import wait_until

BLOCKER = {"prompt": "hold the slot", "max_tokens": 240, "ignore_eos": True, "stream": True}
QUEUED = {"prompt": "wait for it", "max_tokens": 4, "temperature": 0, "stream": True}


async def test_a_queued_stream_gets_keep_alive_comments_then_its_whole_answer(make_server):
    async with make_server(max_num_seqs=1, app_options={"sse_keep_alive": 0.05}) as srv:
        async with aiohttp.ClientSession() as s:
            blocker = await s.post(srv.url + "/v1/completions", json=BLOCKER)
            assert blocker.status == 200
            await blocker.content.readline()  # its first token: the slot is taken
            async with s.post(srv.url + "/v1/completions", json=QUEUED) as queued:
                assert queued.status == 200  # the headers went out with the first comment
                first = await asyncio.wait_for(queued.content.readline(), 10)
                assert first == KEEP_ALIVE[:-1]  # a comment line, before any event
                blocker.close()  # the blocker's client leaves: its abort frees the slot
                rest = (await asyncio.wait_for(queued.read(), 10)).decode()
        events = [line[6:] for line in rest.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert sum(len(c["choices"]) for c in chunks) == 4  # every token arrived
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        assert set(rest.splitlines()) <= {"", ": keep-alive", *(f"data: {e}" for e in events)}


async def test_idle_marked_marks_the_waits_and_keeps_every_item_in_order():
    gate = asyncio.Event()

    async def source():
        await gate.wait()
        yield 1
        yield 2

    seen = []
    async for item in idle_marked(source(), 0.01):
        seen.append(item)
        if item is IDLE and not gate.is_set():
            gate.set()
    assert seen[0] is IDLE and [x for x in seen if x is not IDLE] == [1, 2]


async def test_idle_marked_closes_its_pending_read_when_left():
    entered, left = asyncio.Event(), asyncio.Event()

    async def source():
        try:
            entered.set()
            await asyncio.Event().wait()  # never yields
            yield 0
        finally:
            left.set()

    marked = idle_marked(source(), 0.01)
    assert await anext(marked) is IDLE
    await marked.aclose()  # the consumer leaves (a client gone)
    assert entered.is_set() and await wait_until(left.is_set, timeout=5)


async def test_a_client_that_leaves_a_kept_alive_stream_leaves_nothing_held(make_server):
    """Leaving while queued (keep-alive comments only) and while generating (between
    comments and tokens): every block is back (the fixture checks) and the server serves on."""
    async with make_server(max_num_seqs=1, app_options={"sse_keep_alive": 0.05}) as srv:
        async with aiohttp.ClientSession() as s:
            blocker = await s.post(srv.url + "/v1/completions", json=BLOCKER)
            await blocker.content.readline()
            queued = await s.post(srv.url + "/v1/completions", json=QUEUED)
            assert await asyncio.wait_for(queued.content.readline(), 10) == KEEP_ALIVE[:-1]
            queued.close()  # gone while queued
            await blocker.content.readline()
            blocker.close()  # gone while generating, its stream marked idle between reads
            async with s.post(srv.url + "/v1/completions", json=QUEUED) as again:
                text = (await asyncio.wait_for(again.read(), 10)).decode()
        assert text.rstrip().endswith("data: [DONE]")
