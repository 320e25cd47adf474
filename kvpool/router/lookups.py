"""One replica's ``POST /v1/kvpool/lookup`` answer, as the router's plan reads it (proxy.py)."""

from __future__ import annotations

import asyncio

import aiohttp

from kvpool.router.relayed import asking_identity
from kvpool.router.replicas import Replica, read_json
from kvpool.router.scoring import lookup_counts
from kvpool.router.upstream import SKIP_AUTO_HEADERS

__all__ = ["LOOKUP_PATH", "ask_lookup"]

LOOKUP_PATH = "/v1/kvpool/lookup"


async def ask_lookup(session: aiohttp.ClientSession, r: Replica, raw: bytes, headers: list,
                     timeout: float, most: int) -> tuple[int, int] | None:
    """(hit tokens, at most ``most``: scoring.py NOTE(hit-cap); load) from ``r``'s lookup
    answer to body ``raw`` within ``timeout`` seconds (scoring.lookup_counts), or None."""
    try:
        async with r.lease(counted=False), session.post(
                r.url + LOOKUP_PATH, data=raw, headers=asking_identity(headers),
                skip_auto_headers=SKIP_AUTO_HEADERS,
                timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            r.hear()  # replicas.py NOTE(liveness), and NOTE(small-answers):
            out = await read_json(resp) if resp.status == 200 else None
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
        return None  # late, down, silent or confused: scores hit 0, the choice goes on
    counts = lookup_counts(out, most)
    if counts is not None and isinstance(out.get("replica_id"), str):
        r.replica_id = out["replica_id"][:200]  # a name for logs, not a payload
    return counts
