"""The load a replica reports on ``GET /health`` and in ``POST /v1/kvpool/lookup`` answers.

NOTE(load-counts): ``num_running`` and ``num_waiting`` are /metrics' vllm:num_requests_running
and vllm:num_requests_waiting, read from the engine's metrics snapshot as the collector reads
them (kvpool/metrics/vllm_series.py NOTE(child-requests)): live sequences, so an n = 4 request
counts 4 as vLLM's child requests do; waiting also counts swapped sequences and the requests
admitted but not yet in the scheduler. They were the scheduler's request counts (n = 4 read 1,
a swapped or not yet scheduled request 0), so the router balancing on /health and lookups and
an endpoint picker reading /metrics saw two different loads for one replica.
"""

from __future__ import annotations

from kvpool.metrics.vllm_series import waiting
from kvpool.server.engine_client import EngineClient

__all__ = ["load_counts"]


def load_counts(engine: EngineClient) -> dict[str, int]:
    """``{"num_running", "num_waiting"}`` as the vllm:* gauges count them (NOTE(load-counts));
    the snapshot is the scrape's: lock-free reads, no pool lock."""
    s = engine.snapshot()
    return {"num_running": s.sequences.get("running", 0), "num_waiting": waiting(s)}
