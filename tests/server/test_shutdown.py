"""Shutdown of a real ``kvpool serve`` process on SIGTERM (issue 12, item 7): it keeps its
deadline (exit within --shutdown-timeout + 1 s), a stream still running at the deadline ends
with an OpenAI error event and ``data: [DONE]``, a queued request gets 503 at once, and a second
SIGTERM exits immediately."""

from __future__ import annotations

import asyncio
import json
import signal
import time

import aiohttp

from kvpool.server import serve
from stress.http.edge import LONG_STREAM, cut_stream_events
from tests.server.serve_process import read_rest, subprocess_server

LONG = LONG_STREAM


async def test_sigterm_keeps_its_deadline_and_tells_every_client():
    timeout = 3.0
    async with subprocess_server("--shutdown-timeout", str(timeout), "--max-num-seqs", "1",
                                 blocks=300, context=4096) as (proc, url, lines):
        async with aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/completions", json=LONG) as running:
                assert running.status == 200
                assert (await running.content.readline()).startswith(b"data: {")
                # --max-num-seqs 1: these two wait in the engine's queue behind the stream
                queued_json = asyncio.create_task(s.post(url + "/v1/completions", json={
                    "prompt": "hi", "max_tokens": 5}))
                queued_stream = asyncio.create_task(s.post(url + "/v1/completions", json={
                    "prompt": "hi", "max_tokens": 5, "stream": True}))
                await asyncio.sleep(0.5)
                t0 = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                for task in (queued_json, queued_stream):
                    resp = await asyncio.wait_for(task, timeout=30)
                    body = await resp.read()
                    assert resp.status == 503, body
                    err = json.loads(body)["error"]
                    assert err["code"] == "shutting_down" and err["type"] == "server_error"
                    assert resp.headers["Retry-After"]
                rest = await asyncio.wait_for(running.read(), timeout=30)
            cut_stream_events(rest)  # an error event, then [DONE] (stress/http/edge.py)
        assert await asyncio.wait_for(proc.wait(), timeout=30) == 0
        elapsed = time.monotonic() - t0
        assert elapsed <= timeout + 1.0, f"exited {elapsed:.2f}s after SIGTERM"
        out = await read_rest(proc, lines)
        assert f"{serve.STOPPED_PREFIX}300 device blocks free" in out, out
        assert "Traceback" not in out, out


async def test_second_sigterm_exits_at_once():
    async with subprocess_server("--shutdown-timeout", "60", blocks=300,
                                 context=4096) as (proc, url, lines):
        async with aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/completions", json=LONG) as running:
                assert running.status == 200
                await running.content.readline()
                proc.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.5)
                assert proc.returncode is None  # the first one drains (for up to 60 s)
                t0 = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                code = await asyncio.wait_for(proc.wait(), timeout=30)
                elapsed = time.monotonic() - t0
        assert code == serve.FORCED_EXIT_STATUS
        assert elapsed < 10, f"the second SIGTERM took {elapsed:.1f}s"  # vs the 60 s drain
        assert serve.FORCED_EXIT_LINE in await read_rest(proc, lines)
