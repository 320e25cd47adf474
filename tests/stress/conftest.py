"""Fixtures for the stress tests: in-process servers on 127.0.0.1 (the real engine and app in a
background thread, see stress/http/servers.py) whose teardown checks that nothing leaked, and an
engine factory for the engine-level fault tests."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from stress.http.servers import InProcessServer
from kvpool.runtime.engine.config import EngineConfig
from tests.configs import SERVE_LIMITS, engine_config
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)



def stress_config(**overrides: Any) -> EngineConfig:
    """The stress tests' engine: the "stress" pool with the HTTP request limits and 64 tokens
    per request at most (tests/configs.py), ``overrides`` on top."""
    return engine_config("stress", **{**SERVE_LIMITS, "max_tokens_limit": 64, **overrides})


def wait_idle(engine: Any, timeout: float = 10.0) -> bool:
    """Until the engine has no request and no used block in either pool."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        st = engine.core.manager.stats()
        if (not engine.core.has_work() and not engine._streams and st.device.num_used == 0
                and st.host.num_used == 0):
            return True
        time.sleep(0.01)
    return False


def assert_clean(engine: Any) -> None:
    assert wait_idle(engine), f"blocks still in use: {engine.core.manager.stats()}"
    assert engine.core.check_invariants()
    assert engine.core.invariant_violations == 0
    assert engine.is_healthy()


@contextlib.contextmanager
def running_server(**overrides: Any) -> Iterator[InProcessServer]:
    app_keys = ("api_key", "max_body_bytes", "tenant_block_quota", "faults",
                "invariant_check_interval", "header_timeout", "keep_alive_timeout",
                "max_connections")
    app_kw = {k: overrides.pop(k) for k in app_keys if k in overrides}
    app_kw.setdefault("invariant_check_interval", 1)
    app_kw.setdefault("max_body_bytes", 64 * 1024)
    srv = InProcessServer(stress_config(**overrides), shutdown_timeout=5.0, **app_kw)
    srv.start()
    try:
        yield srv
        assert_clean(srv.engine)
    finally:
        srv.stop()


@pytest.fixture
def make_server():
    """``with make_server(api_key=..., tenant_block_quota=..., **engine_config) as srv:``"""
    return running_server
