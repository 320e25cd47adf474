"""NOTE(gc-freeze): `kvpool serve` freezes the heap it built at startup before it listens, so
a full garbage collection while serving walks only what serving allocated (a full walk of the
~400k startup objects held the GIL ~0.7 s: the stress run's worst /health stalls)."""

from __future__ import annotations

import asyncio
import gc

import aiohttp

from kvpool.server.serve import ServeOptions, serve
from tests.configs import engine_config


async def test_serve_freezes_the_startup_heap_before_listening():
    gc.unfreeze()  # another test's serve() may have frozen this process's heap
    assert gc.get_freeze_count() == 0
    stop = asyncio.Event()
    seen: dict[str, int] = {}
    ready = asyncio.Event()

    def on_ready(host: str, port: int) -> None:
        seen["frozen"] = gc.get_freeze_count()
        seen["port"] = port
        ready.set()

    config = engine_config("device_only", num_device_blocks=16, max_model_len=64,
                           num_threads=1)
    task = asyncio.create_task(serve(config, ServeOptions(port=0), stop=stop,
                                     on_ready=on_ready, handle_signals=False))
    try:
        await asyncio.wait_for(ready.wait(), timeout=120)
        # everything built so far (model parameters, tokenizer, app) is in the permanent
        # generation: a full collection no longer walks it
        assert seen["frozen"] > 10_000
        gen_objects = {id(o) for o in gc.get_objects()}
        assert id(config) not in gen_objects  # built before serve(): frozen with the rest
        async with aiohttp.ClientSession() as s, \
                s.get(f"http://127.0.0.1:{seen['port']}/health") as r:
            assert r.status == 200
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=60)
        gc.unfreeze()
