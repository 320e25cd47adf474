"""--max-queue bounds the requests in flight (QueueFullError, the server's 503); its default
stays 1024 where vLLM's --max-num-queued-reqs has none (engine/config.py NOTE(queue-bound)), and
an embedder's None is no bound, as vLLM's."""

from __future__ import annotations

import pytest

from kvpool.runtime.engine.async_engine import AsyncEngine
from kvpool.errors import ConfigError, QueueFullError
from kvpool.runtime.model import SamplingParams
from tests.configs import engine_config

DEFAULT_BOUND = 1024


async def admitted(engine: AsyncEngine, count: int) -> int:
    """Queue ``count`` requests on an engine whose step thread never runs (nothing generates:
    admission alone is under test); how many were admitted before a QueueFullError."""
    try:
        for i in range(count):
            engine.generate(f"r{i}", [1, 2, 3], SamplingParams(max_tokens=1))
        return count
    except QueueFullError:
        return engine.requests_in_flight()
    finally:
        await engine.shutdown(timeout=0)


async def test_none_is_no_bound_and_the_default_is_one():
    engine = AsyncEngine(engine_config("small", max_queue=None))
    assert await admitted(engine, DEFAULT_BOUND + 1) == DEFAULT_BOUND + 1
    engine = AsyncEngine(engine_config("small"))
    assert await admitted(engine, DEFAULT_BOUND + 1) == DEFAULT_BOUND


async def test_a_set_bound_still_holds():
    assert await admitted(AsyncEngine(engine_config("small", max_queue=3)), 5) == 3


def test_zero_is_still_refused():
    with pytest.raises(ConfigError, match="max-queue"):
        engine_config("small", max_queue=0)
