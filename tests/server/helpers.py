"""Helpers shared by the server tests: scraping /metrics, waiting for the pool to drain, /health
during a large body's parse, a ``kvpool serve DIR`` process."""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from kvpool.runtime.engine.context_fit import LONG_CONTEXT_ENV
from kvpool.server import serve
from kvpool.server.app import ROUTES_KEY
from openai import AsyncOpenAI

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Running:
    """One live server: its base URL, engine and app."""

    url: str
    engine: Any
    app: web.Application
    server: TestServer

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def free(self) -> int:
        return self.engine.num_free_blocks()


def parse_metrics(text: str) -> dict[str, dict[tuple, float]]:
    """sample name -> {sorted label items: value}"""
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


async def sse_chunks(url: str, body: dict) -> list[dict]:
    """POST ``body`` to ``url`` and read its SSE answer: a 200 that ends with ``[DONE]``; the
    chunks before it, parsed."""
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        assert r.status == 200, await r.text()
        raw = await r.text()
    events = [e.removeprefix("data: ") for e in raw.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


async def post_ok(url: str, body: dict) -> dict:
    """POST ``body`` to ``url``: a 200, its JSON."""
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def scrape(srv: Running) -> dict[str, dict[tuple, float]]:
    async with aiohttp.ClientSession() as s, s.get(srv.url + "/metrics") as r:
        assert r.status == 200
        return parse_metrics(await r.text())


async def generated_tokens(srv: Running) -> float:
    return (await scrape(srv))["kvpool_generation_tokens_total"][()]


async def wait_free(srv: Running, baseline: int, timeout: float = 10.0) -> float:
    """Poll until the engine's free device blocks are back to ``baseline``; seconds taken."""
    t0 = time.monotonic()
    while srv.free() != baseline and time.monotonic() - t0 < timeout:
        await asyncio.sleep(0.01)
    return time.monotonic() - t0


async def wait_until(predicate, timeout: float = 10.0, interval: float = 0.005) -> bool:
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            return False
        await asyncio.sleep(interval)
    return True


async def health_during_parse(srv: Running, url: str, body: dict,
                              bound: float = 5.0) -> tuple[int, dict]:
    """POST ``body`` (large enough for the app's ParsePool) to ``url``; once its parse is under
    way, /health must answer before the POST does and within ``bound`` seconds. The ordering
    is the property (a parse on the loop never lets /health in first); the bound is only a
    liveness limit: the parse thread holds the GIL between switches, and on a loaded 2-core
    box /health once took 2.1 s while still answering first. The POST's (status, JSON)."""
    pool = srv.app[ROUTES_KEY].parse_pool
    async with aiohttp.ClientSession() as s:
        async def big() -> tuple[int, dict]:
            async with s.post(url, json=body) as r:
                return r.status, await r.json()

        task = asyncio.create_task(big())
        # (on the loop the server shares) wait until the parse is under way; a body parsed on
        # the loop never lets this check run mid-parse
        while not task.done() and pool.parsing == 0:
            await asyncio.sleep(0.005)
        t0 = time.monotonic()
        async with s.get(srv.url + "/health") as r:
            assert r.status == 200
        took = time.monotonic() - t0
        assert not task.done(), f"{url} finished before /health: the loop was blocked"
        assert took < bound, f"/health took {took:.2f}s during the parse of a {url} body"
        status, out = await task
    assert pool.parsing == 0
    return status, out


def stop_process(proc: subprocess.Popen, timeout: float = 30) -> None:
    """Stop a process a test started, by its pid: SIGTERM, then SIGKILL past ``timeout``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


class ServerProcess:
    """``python -m kvpool.server.serve DIR [FLAGS]`` on 127.0.0.1:0, stopped by its pid (a
    flag given again in ``flags`` wins over the small defaults here)."""

    def __init__(self, model_dir: Path, *flags: str) -> None:
        # the test models have 512 positions and serve a longer context on purpose: allowed
        # as vLLM allows it (kvpool/runtime/engine/context_fit.py NOTE(long-context))
        env = {**os.environ, "PYTHONPATH": str(ROOT), LONG_CONTEXT_ENV: "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvpool.server.serve", str(model_dir), "--port", "0",
             "--num-host-blocks", "0", "--num-threads", "1", "--log-level", "warning",
             *flags],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.url = self._wait_ready(timeout=90)

    @classmethod
    def serving(cls, model_dir: Path, *flags: str) -> Iterator[str]:
        """A module fixture's body: the URL of a server on ``model_dir`` with ``flags`` and
        the small test pool (256 blocks, 1024-token context), stopped after."""
        server = cls(model_dir, "--num-device-blocks", "256", "--max-model-len", "1024", *flags)
        try:
            yield server.url
        finally:
            server.stop()

    def _wait_ready(self, timeout: float) -> str:
        lines: list[str] = []
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not sel.select(timeout=1.0):
                continue
            raw = self.proc.stdout.readline()
            if not raw:
                break
            lines.append(raw.decode())
            if lines[-1].startswith(serve.READY_PREFIX):
                return "http://" + lines[-1].removeprefix(serve.READY_PREFIX).split()[0]
        self.stop()
        raise AssertionError("server did not start:\n" + "".join(lines))

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc.stdout.close()


def whole_vocab_names(top: dict[str, float], tokenizer) -> bool:
    """Whether a completions ``top_logprobs`` entry over the whole vocabulary holds every
    token whose text is whole, and past those only what vLLM names a byte of a split character
    ("" or the character it completes; never U+FFFD: NOTE(logprob-names))."""
    texts = {tokenizer.decode([i], skip_special_tokens=False)
             for i in range(tokenizer.vocab_size)}
    whole = {t for t in texts if not t.endswith("\ufffd")}
    extra = set(top) - whole
    return whole <= set(top) and all(len(k) <= 1 and k != "\ufffd" for k in extra)


def openai_client(srv: Running, timeout: float = 60) -> AsyncOpenAI:
    """The openai SDK's async client on ``srv``, no retries (a failure shows at once)."""
    return AsyncOpenAI(base_url=srv.v1, api_key="unused", max_retries=0, timeout=timeout)
