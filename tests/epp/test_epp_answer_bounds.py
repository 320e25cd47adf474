"""What the picker's answer phase holds is bounded process-wide and let go at a stop without a
byte lost (kvpool/epp/listener.py NOTE(answer-budget), service.py NOTE(answer-phase)): a real
Envoy (the shipped deploy/envoy/envoy.yaml, bench/envoy_proc.py, stopped by pid), the real
picker with --model-rewrites and aiohttp replicas on 127.0.0.1 whose SSE streams stop mid-event
until the test lets them go on (``stuck``).

* Four streams each holding a partial event of 3.5 MiB against a --max-held-bytes whose half
  (what answers may take) fits three: the held-bytes gauge counts the held events and never
  passes the budget; the stream that found no room goes on unrestored; every client gets its
  whole stream byte for byte. Before, held answer bytes were outside the budget (the gauge
  read 0 while 14 MiB were held) and open calls x --max-body-bytes bounded them.
* A stop while a call's piece is being restored on a worker thread, holding nothing yet
  (answers.py ``worker_gate``, the test's seam): the call ends only once that piece's held
  bytes went out with the next one. Before, it was ended at once and the held bytes were lost.
* A Responses creation whose model is put back and whose id is read, near the budget: its
  held bytes count once (answers.py NOTE(once)). Before, twice: it gave up with room left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import aiohttp
from aiohttp import web

from bench.envoy_proc import Envoy
from kvpool.epp import answers
from kvpool.epp.cli import picking
from kvpool.epp.metrics import MetricsPort
from kvpool.epp.picker import Picker
from kvpool.epp.rewrite import parse_rewrites
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.epp.test_epp_answer_hostile import ASKED, PATH, RULES, TARGET, event, settled
from tests.epp.test_epp_metrics import scrape
from tests.router.helpers import LOOKUP_TIMEOUT, apps_served
from tests.router.test_router_hostile_replica import answering_replica

LIMIT = 4 << 20  # --max-body-bytes: what one answer's restore may hold
CONNECTION = LIMIT + (8 << 20) + 5  # --max-connection-bytes: one largest call (cli.limits)
BUDGET = 2 * CONNECTION  # --max-held-bytes: answers take half, a connection's window is left
STREAMS, BIG = 4, 7 << 19  # four partial events of 3.5 MiB: three fit in BUDGET // 2
RID = "resp_" + "3" * 32


def partial(model: str, size: int) -> bytes:
    """An event's first ``size``-odd bytes: no blank line, the model named up front."""
    return b'data: {"model": "' + model.encode() + b'", "pad": "' + b"x" * size


def rest(model: str) -> bytes:
    return b'"}\n\n' + event(model) + b"data: [DONE]\n\n"


def created(model: str, size: int) -> bytes:
    """A Responses stream's first event, response.created, cut ``size``-odd bytes in."""
    return (b'data: {"type": "response.created", "response": {"id": "' + RID.encode()
            + b'", "object": "response", "model": "' + model.encode()
            + b'", "instructions": "' + b"x" * size)


def created_rest(model: str) -> bytes:
    done = {"type": "response.completed", "response": {"id": RID, "model": model}}
    return b'"}}\n\n' + b"data: " + json.dumps(done).encode() + b"\n\ndata: [DONE]\n\n"


def replica(stuck: asyncio.Event) -> web.Application:
    """A stream: one event and the start of the next (``size`` bytes of it) in one write, the
    rest once ``stuck`` is set; on /v1/responses, ``created`` and then ``created_rest``."""
    async def answer(request):
        body = json.loads(await request.read())
        model, size = body["model"], body["size"]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        creation = request.path == "/v1/responses"
        await resp.write(created(model, size) if creation else event(model) + partial(model,
                                                                                    size))
        await stuck.wait()
        await resp.write(created_rest(model) if creation else rest(model))
        return resp

    return answering_replica(answer, PATH, "/v1/responses")


@contextlib.asynccontextmanager
async def gateway(workdir):
    """STREAMS replicas, the picker (RULES, LIMIT, CONNECTION, BUDGET, a metrics port) and
    Envoy; yields (Envoy's URL, the metrics URL, the picker's port, ``stuck``, its stop)."""
    stuck = asyncio.Event()
    async with contextlib.AsyncExitStack() as stack:
        urls = await stack.enter_async_context(apps_served(
            *(replica(stuck) for _ in range(STREAMS))))
        stack.callback(stuck.set)  # a handler still waiting ends before its server
        router = Router(ReplicaSet(urls, interval=3600), lookup_timeout=LOOKUP_TIMEOUT,
                        max_body_bytes=LIMIT)
        metrics = MetricsPort("127.0.0.1", 0)
        served = contextlib.AsyncExitStack()
        port = await served.enter_async_context(picking(
            Picker(router, parse_rewrites(RULES)), "127.0.0.1", 0, metrics=metrics,
            max_connection_bytes=CONNECTION, max_held_bytes=BUDGET))
        stack.push_async_callback(served.aclose)
        envoy = Envoy(port, workdir)
        await asyncio.to_thread(envoy.start)
        stack.push_async_callback(asyncio.to_thread, envoy.stop)
        yield envoy.url, metrics.url, port, stuck, served.aclose


async def test_held_answer_bytes_count_against_the_budget(tmp_path):
    async with gateway(tmp_path) as (url, metrics, _, stuck, _s), aiohttp.ClientSession() as s:
        got: list[bytearray] = [bytearray() for _ in range(STREAMS)]

        async def read(i: int) -> None:
            async with s.post(url + PATH, json={"model": ASKED, "stream": True, "size": BIG},
                              timeout=aiohttp.ClientTimeout(total=30)) as r:
                assert r.status == 200
                async for piece in r.content.iter_any():
                    got[i] += piece
        clients = asyncio.gather(*(read(i) for i in range(STREAMS)))
        held, peak = partial(TARGET, BIG), 0
        for _ in range(400):  # until every stream's partial event is held or gone on
            figures = await scrape(s, metrics)
            peak = max(peak, figures["kvpool_epp_held_bytes"])
            on = sum(len(g) > len(event(ASKED)) for g in got)  # went on, unrestored
            if on and figures["kvpool_epp_held_bytes"] == (STREAMS - on) * len(held):
                break
            await asyncio.sleep(0.01)
        assert 1 <= on < STREAMS and peak <= BUDGET, (on, figures, peak)
        assert figures["kvpool_epp_held_bytes"] == (STREAMS - on) * len(held), figures
        stuck.set()
        await clients
        # restored, or gone on unrestored from the piece that found no room (the first)
        whole = {event(first) + partial(model, BIG) + rest(model)
                 for first, model in ((ASKED, ASKED), (ASKED, TARGET), (TARGET, TARGET))}
        assert all(bytes(g) in whole for g in got), [bytes(g[-60:]) for g in got]
        assert sum(TARGET.encode() in g for g in got) == on
        figures = await settled(s, metrics)
        assert (figures["kvpool_epp_open_streams"], figures["kvpool_epp_held_bytes"]) == (0, 0)


async def refused(port: int) -> None:
    """Until the picker's port refuses connections: its stop let the answers go first."""
    for _ in range(200):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return
        writer.close()
        await asyncio.sleep(0.01)
    raise AssertionError("the picker's port is still open")


async def test_a_stop_while_a_piece_is_restored_on_a_worker_thread(tmp_path, monkeypatch):
    entered, go = asyncio.Event(), asyncio.Event()

    async def gate() -> None:  # the first worker-thread restore waits for the test
        entered.set()
        await go.wait()
    monkeypatch.setattr(answers, "worker_gate", gate)
    size = 200 << 10  # past the 64 KiB restored inline
    async with gateway(tmp_path) as (url, _, port, stuck, stop), aiohttp.ClientSession() as s:
        async with s.post(url + PATH, json={"model": ASKED, "stream": True, "size": size},
                          timeout=aiohttp.ClientTimeout(total=20)) as r:
            await asyncio.wait_for(entered.wait(), 10)
            stopping = asyncio.create_task(stop())
            await refused(port)  # let_answers_go ran while the piece waited at the gate
            go.set()
            got = await r.content.readuntil(b"\n\n")
            stuck.set()
            got += await r.content.read()
        await asyncio.wait_for(stopping, 4)
    assert r.status == 200 and got == event(ASKED) + partial(TARGET, size) + rest(TARGET), (
        len(got), got[-80:])


async def until(s: aiohttp.ClientSession, metrics: str, held: int, gone: list[bytearray],
                skip: int = 0) -> dict[str, float]:
    """The picker's figures once it holds ``held`` answer bytes, or a client of ``gone`` got
    more than its first ``skip`` bytes (its held event went on)."""
    for _ in range(400):
        figures = await scrape(s, metrics)
        if figures["kvpool_epp_held_bytes"] == held or any(len(g) > skip for g in gone):
            return figures
        await asyncio.sleep(0.01)
    return figures


async def test_a_restored_creations_held_bytes_count_once(tmp_path):
    """kvpool/epp/answers.py NOTE(once): a Responses creation whose model is put back and
    whose id is read holds its cut response.created event (``size`` bytes) once. Three
    rewritten streams hold partial events leaving ``room`` of the answers' half of the budget,
    with size < room < 2 * size: the event fits, is restored and its id learnt. Before, the
    restore's and the id reader's copies were both counted (2 * size): no room, the event went
    on unrestored (the target model) and the id was not learnt."""
    size, room = 100_000, 150_000
    filler = (BUDGET // 2 - room) // 3 - len(partial(TARGET, 0))
    fillers_held, cut = 3 * len(partial(TARGET, filler)), len(created(TARGET, size))
    async with gateway(tmp_path) as (url, metrics, _, stuck, _s), aiohttp.ClientSession() as s:
        got: list[bytearray] = [bytearray() for _ in range(4)]

        async def read(i: int, path: str, size: int) -> None:
            async with s.post(url + path, json={"model": ASKED, "stream": True, "size": size},
                              timeout=aiohttp.ClientTimeout(total=30)) as r:
                assert r.status == 200
                async for piece in r.content.iter_any():
                    got[i] += piece
        fillers = asyncio.gather(*(read(i, PATH, filler) for i in range(3)))
        figures = await until(s, metrics, fillers_held, got[:3], len(event(ASKED)))
        assert figures["kvpool_epp_held_bytes"] == fillers_held, figures
        creation = asyncio.create_task(read(3, "/v1/responses", size))
        figures = await until(s, metrics, fillers_held + cut, got[3:])
        assert (figures["kvpool_epp_held_bytes"], bytes(got[3][:60])) == (
            fillers_held + cut, b""), figures
        stuck.set()
        await asyncio.gather(fillers, creation)
        assert all(bytes(g) == event(ASKED) + partial(ASKED, filler) + rest(ASKED)
                   for g in got[:3])
        assert bytes(got[3]) == created(ASKED, size) + created_rest(ASKED), bytes(got[3][:200])
        figures = await settled(s, metrics)
        assert figures["kvpool_router_response_ids"] == 1  # learnt from the answer
        assert (figures["kvpool_epp_open_streams"], figures["kvpool_epp_held_bytes"]) == (0, 0)
