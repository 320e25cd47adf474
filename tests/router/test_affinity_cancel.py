"""A follow-up waiting for a search slot that is cancelled (its client gone) as a slot frees
stays cancelled (affinity.py NOTE(slot-cancel)). The wait was ``asyncio.wait_for``; on Python
3.11 wait_for returns when its task is cancelled in the step its inner wait finished (CPython
gh-86296), so such a follow-up went on to search the replicas and be relayed for nobody.

A real aiohttp replica on 127.0.0.1 whose response GETs wait for the test; one search slot.
The cancel is made by the searching follow-up's end (a done callback), which lands it in the
step the waiting one's slot wait completes: the race's timing, without relying on luck.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from kvpool.router.affinity import ResponseAffinity
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import apps_served


def gated_replica(gate: asyncio.Event) -> web.Application:
    async def get_response(_):
        await gate.wait()
        return web.json_response({"error": {"message": "no such response"}}, status=404)

    app = web.Application()
    app.router.add_get("/v1/responses/{rid}", get_response)
    return app


async def until(pred) -> None:
    for _ in range(500):  # bounded: 5 s
        if pred():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the follow-ups never got there")


async def test_a_follow_up_cancelled_as_its_slot_frees_stays_cancelled():
    gate = asyncio.Event()
    async with apps_served(gated_replica(gate)) as (url,), aiohttp.ClientSession() as s:
        affinity = ResponseAffinity(max_lookups=1, timeout=5.0)
        replicas = ReplicaSet([url])
        first = asyncio.create_task(affinity.owner("resp_a", replicas, s, []))
        await until(lambda: affinity.searching == 1)
        second = asyncio.create_task(affinity.owner("resp_b", replicas, s, []))
        await until(lambda: affinity.waiting == 1)
        first.add_done_callback(lambda _: second.cancel())  # its client left just then
        gate.set()
        assert await first is None
        outcome = (await asyncio.gather(second, return_exceptions=True))[0]
        # cancelled, wherever the cancel landed (its search may have started): before, it
        # finished its search and returned, to be relayed for a client that had left
        assert isinstance(outcome, asyncio.CancelledError), outcome
        assert affinity.searching == 0 and affinity.waiting == 0  # nothing left held
