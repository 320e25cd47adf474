"""max_model_len against a small KV pool (context_fit.py): a request without max_tokens must
never be refused for a max_tokens default the client did not send.

- max_model_len derived from the model (8192 for the built-in tiny model) and a pool of fewer
  tokens: capped to the pool, one log line; the default max_tokens then fits (real app).
- --max-model-len given and more than the pool holds: ``kvpool serve`` refuses to start (exit
  2), naming both numbers and the flags that fix it (real subprocess); so does one more than
  the model's own context (NOTE(long-context))."""

from __future__ import annotations

import asyncio
import logging
import os

import aiohttp
import pytest

from kvpool.errors import ConfigError
from kvpool.runtime.engine.async_engine import AsyncEngine
from kvpool.runtime.engine.context_fit import LONG_CONTEXT_ENV, require_within_model
from kvpool.server import serve
from tests.configs import engine_config
from tests.server.serve_process import ROOT, serve_command

SMALL_POOL = dict(num_device_blocks=4, num_host_blocks=0, max_model_len=None)  # 64 tokens


async def test_a_derived_context_is_capped_to_the_pool_and_the_default_max_tokens_fits(
        make_server, caplog):
    with caplog.at_level(logging.WARNING, logger="kvpool.runtime.engine.context_fit"):
        async with make_server(**SMALL_POOL) as srv:
            async with aiohttp.ClientSession() as s:
                # chat's default max_tokens is all the room the context leaves
                async with s.post(srv.v1 + "/chat/completions", json={
                        "messages": [{"role": "user", "content": "hi"}], "temperature": 0,
                        "ignore_eos": True}) as r:
                    body = await r.json()
                    assert r.status == 200, body  # no max_tokens: the default fits the pool
            assert body["choices"][0]["finish_reason"] == "length"
            usage = body["usage"]
            assert usage["prompt_tokens"] + usage["completion_tokens"] == 64
            async with aiohttp.ClientSession() as s, s.get(srv.v1 + "/models") as r:
                assert (await r.json())["data"][0]["max_model_len"] == 64  # not 8192
            capped = [r.getMessage() for r in caplog.records
                      if r.name == "kvpool.runtime.engine.context_fit"]
            assert len(capped) == 1 and "capped to 64" in capped[0] and "8192" in capped[0]


async def refused(*flags: str) -> str:
    """The last stderr line of a ``kvpool serve`` with ``flags`` that must exit 2 before it
    listens (stopped by its pid otherwise)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(LONG_CONTEXT_ENV, None)
    proc = await asyncio.create_subprocess_exec(
        *serve_command(), "--port", "0", "--num-host-blocks", "0", "--num-threads", "1",
        "--log-level", "warning", *flags,
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:  # read until it exits, or until it says it listens (the bug: it must not start)
        out = b""
        while raw := await asyncio.wait_for(proc.stdout.readline(), timeout=90):
            out += raw
            assert not raw.decode().startswith(serve.READY_PREFIX), out.decode()
        err = await asyncio.wait_for(proc.stderr.read(), timeout=30)
        assert await asyncio.wait_for(proc.wait(), timeout=30) == 2
    finally:
        if proc.returncode is None:  # stop it by its pid
            proc.kill()
            await proc.wait()
    return err.decode().strip().splitlines()[-1]


async def test_an_explicit_context_beyond_the_pool_refuses_to_start():
    line = await refused("--num-device-blocks", "8", "--max-model-len", "256")
    assert line.startswith("kvpool serve: --max-model-len 256 "), line
    assert "8 device blocks of 16 tokens = 128 tokens" in line
    assert "--max-model-len to 128 or less" in line and "--kv-cache-memory" in line


async def test_a_context_beyond_the_models_refuses_to_start_unless_allowed(caplog):
    """context_fit.py NOTE(long-context): the built-in model has 8192 positions; 9000 is
    refused as vLLM refuses it (it was served), unless $VLLM_ALLOW_LONG_MAX_MODEL_LEN."""
    engine = AsyncEngine(engine_config("serve", num_device_blocks=600, max_model_len=9000))
    try:
        with pytest.raises(ConfigError) as e:
            serve._require_context(engine, 16)  # what kvpool serve checks before it listens
    finally:
        engine.core.close()
    line = str(e.value)
    assert line.startswith("--max-model-len 9000 is more than the model's context (8192 "
                           "tokens"), line
    assert f"{LONG_CONTEXT_ENV}=1" in line and "--max-model-len to 8192 or less" in line
    with caplog.at_level(logging.WARNING, logger="kvpool.runtime.engine.context_fit"):
        for value in ("1", "true", " TRUE "):
            require_within_model(9000, 8192, {LONG_CONTEXT_ENV: value})
        require_within_model(8192, 8192, {})
    assert len(caplog.records) == 3 and "never trained" in caplog.records[0].getMessage()
    for value in ("0", "", "yes"):
        with pytest.raises(ConfigError):
            require_within_model(9000, 8192, {LONG_CONTEXT_ENV: value})
