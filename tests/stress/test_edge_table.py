"""The connection-edge table (stress/http/edge.py, issue 12 items 5, 7, 9) against the in-process
server the stress harness uses (it listens through the guarded listener), and its one
real-process case: SIGTERM while a stream runs. Every case must get its answer, the server
keeps serving after each, and no client fault logs a traceback or an ERROR line."""

from __future__ import annotations

import asyncio
import logging
import signal

import aiohttp

from stress.http.edge import EDGE_CASES, EdgeTarget, health
from stress.http.servers import SpawnedServer

HEADER_TIMEOUT = 2.0
KEEP_ALIVE_TIMEOUT = 3.0
CAP = 12  # above the reset case's 8 connections: they reach the app, not the cap
NORMAL = {"prompt": "hello there", "max_tokens": 4, "temperature": 0}


def test_table_covers_items_5_7_9():
    assert {c.item for c in EDGE_CASES} == {5, 7, 9}
    assert len({c.name for c in EDGE_CASES}) == len(EDGE_CASES)
    assert [c.name for c in EDGE_CASES if c.needs_process] == ["sigterm_running_stream"]


async def test_edge_table_in_process(make_server, caplog):
    caplog.set_level(logging.INFO)
    with make_server(header_timeout=HEADER_TIMEOUT, keep_alive_timeout=KEEP_ALIVE_TIMEOUT,
                     max_connections=CAP) as srv:
        target = EdgeTarget(srv.url, HEADER_TIMEOUT, KEEP_ALIVE_TIMEOUT, CAP)
        for case in EDGE_CASES:
            if case.needs_process:
                continue
            await case.run(target)
            async with aiohttp.ClientSession() as s:
                async with s.post(srv.url + "/v1/completions", json=NORMAL) as r:
                    assert r.status == 200, f"normal request failed after {case.name}"
        rejected = srv.run_on_loop(lambda: dict(srv.limiter.rejected))
        assert rejected["header_timeout"] >= 3 and rejected["max_connections"] >= 1, rejected
    loud = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not loud, [f"{r.name} {r.levelname} {r.getMessage()}" for r in loud]


async def test_sigterm_running_stream_in_a_real_process():
    case = next(c for c in EDGE_CASES if c.name == "sigterm_running_stream")
    srv = SpawnedServer(["--shutdown-timeout", "0.5", "--num-device-blocks", "300",
                         "--num-host-blocks", "0", "--max-model-len", "4096",
                         "--max-tokens-limit", "4096", "--num-threads", "1",
                         "--log-level", "info"])
    url = srv.start()
    try:
        assert await health(url) == 200
        await case.run(EdgeTarget(url, 10, 15, 1000,
                                  terminate=lambda: srv.proc.send_signal(signal.SIGTERM)))
        # the one SIGTERM drains and exits by itself (stop() would send a second one)
        await asyncio.to_thread(srv.proc.wait, 30)
    finally:
        code = srv.stop(timeout=30)
    assert code == 0, srv.tail()
    log = "\n".join(srv.lines)
    assert "Traceback" not in log and "300 device blocks free" in log, srv.tail()
