"""EngineClient: what the server asks of the engine, written down as one contract.

The routes, the request gate, the lookup and kv-events routes and the app's lifetime hooks
type against this Protocol, never against ``Any``: a call the engine does not offer is a type
error where it is written, not an AttributeError on the first request. ``AsyncEngine``
(runtime/engine/async_engine.py) satisfies it; so may a stand-in that serves the same calls
(the stress harness runs the real one).

::

    lifetime     start() ... shutdown(timeout)          the app's cleanup_ctx
    requests     check_pool / compile_grammar / generate / abort
    cache        reset_prefix_cache(reset_running_requests)   the development routes
    read-only    config, model_name, tokenizer, max_model_len, metrics, is_healthy(),
                 num_free_blocks(), snapshot() (the /metrics scrape's figures; /health and
                 the lookup read its load: load_counts.py), core (the lookup and kv-events
                 routes read its manager and scheduler), remote_link (the shared prefix
                 tier, None without one)

NOTE(contract): the edge judges a prompt's input rules once (protocol.py: empty, vocabulary,
context length), asks ``check_pool`` for every prompt of a request before it starts any, then
calls ``generate(..., checked=True)`` with the token ids, the tenant and the namespaced cache
salt (request_gate.py): the engine trusts that and judges none of it again. ``generate`` still
raises QueueFullError (503) when the engine is full. ``check_pool`` judges n sequences that
cannot run as forks as one (NOTE(apart) in kvpool/sched/request_checker.py): the gate then
opens them as child requests, each a group of as many forks as fit (child_requests.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the contract names the engine's types; importing them pulls in torch
    from kvpool.metrics import KVPoolMetrics
    from kvpool.metrics.snapshot import MetricsSnapshot
    from kvpool.runtime.engine.config import EngineConfig
    from kvpool.runtime.engine.core import EngineCore
    from kvpool.runtime.engine.output_processor import RequestOutput
    from kvpool.runtime.model import SamplingParams
    from kvpool.runtime.model.tokenizer import Tokenizer
    from kvpool.runtime.remote.link import RemoteLink

__all__ = ["EngineClient", "UpdateStream"]


class UpdateStream(Protocol):
    """One request's updates, in order, the last one ``finished``; closable early."""

    request_id: str | None

    def __aiter__(self) -> UpdateStream: ...

    async def __anext__(self) -> RequestOutput: ...

    async def aclose(self) -> None: ...


class EngineClient(Protocol):
    """The engine as the server uses it (see the module docstring)."""

    config: EngineConfig
    model_name: str
    tokenizer: Tokenizer
    max_model_len: int
    metrics: KVPoolMetrics
    core: EngineCore
    remote_link: RemoteLink | None

    async def start(self) -> None: ...

    async def shutdown(self, timeout: float = ...) -> None: ...

    def is_healthy(self) -> bool: ...

    def num_free_blocks(self) -> int: ...

    def snapshot(self) -> MetricsSnapshot: ...

    def check_pool(self, prompt_ids: list[int], params: SamplingParams) -> None: ...

    async def compile_grammar(self, params: SamplingParams) -> SamplingParams: ...

    def generate(self, request_id: str | None, prompt: str | list[int],
                 params: SamplingParams, *, cache_salt: str | None = None, priority: int = 0,
                 tenant: str | None = None, checked: bool = False) -> UpdateStream: ...

    async def abort(self, request_id: str) -> None: ...

    async def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool: ...
