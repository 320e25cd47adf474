"""Real servers for the server tests: the real AsyncEngine (built-in tiny model, small pools)
behind the real app, on a real TCP socket on 127.0.0.1 with an ephemeral port.

``make_server(**config_overrides)`` is an async context-manager factory; every server it starts
is closed at the end of the test, and the teardown checks that every device block is back in
the pool (no leak survives a test unnoticed).
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from kvpool.server.app import build_app
from tests.configs import SERVE_LIMITS, engine_config
from tests.server.helpers import Running, wait_free
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)

PLAIN_TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\n{% endfor %}"
                  "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
SHUTDOWN_TIMEOUT = 5.0  # a test that wedges a handler fails in seconds, not aiohttp's 60


@pytest.fixture
def busy_port():
    """A port another socket listens on (127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.fixture
async def make_server():
    """``async with make_server(api_key=..., max_body_bytes=..., app_options={build_app
    keyword: value}, server_options={TestServer keyword: value}, **config) as srv: ...``"""
    from kvpool.runtime.engine.async_engine import AsyncEngine

    started: list[Running] = []

    @contextlib.asynccontextmanager
    async def factory(*, api_key: str | None = None, max_body_bytes: int = 64 * 1024,
                      app_options: dict[str, Any] | None = None,
                      server_options: dict[str, Any] | None = None,
                      **overrides: Any) -> AsyncIterator[Running]:
        config = engine_config("serve", **{**SERVE_LIMITS, "max_tokens_limit": 512, **overrides})
        engine = AsyncEngine(config)
        app = build_app(engine, api_key=api_key, max_body_bytes=max_body_bytes,
                        engine_shutdown_timeout=SHUTDOWN_TIMEOUT, **(app_options or {}))
        server = TestServer(app, host="127.0.0.1", port=0, **(server_options or {}))
        await server.start_server(shutdown_timeout=SHUTDOWN_TIMEOUT)
        srv = Running(f"http://127.0.0.1:{server.port}", engine, app, server)
        started.append(srv)
        baseline = srv.free()
        try:
            yield srv
        except BaseException:
            await server.close()
            raise
        await wait_free(srv, baseline)
        free_before_close = srv.free()
        await server.close()
        assert free_before_close == baseline, (
            f"{baseline - free_before_close} device blocks still in use after the test")

    yield factory
    for srv in started:  # a test that failed inside the block still closes its server
        await srv.server.close()


@pytest.fixture
async def srv(make_server):
    """The default server: 48 device blocks of 16 tokens, 32 host blocks, 256-token context."""
    async with make_server() as s:
        yield s


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A tiny Llama directory and transformers' float32 model of it (the logprob oracle)."""
    transformers = pytest.importorskip("transformers")
    import torch

    from tests.runtime.model.helpers import save_hf_model

    d = save_hf_model(tmp_path_factory.mktemp("hf_llama"), "llama")
    # a tokenizer without a chat template serves no chat (NOTE(no-template)): give it one
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": PLAIN_TEMPLATE}))
    hf = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    return d, hf
