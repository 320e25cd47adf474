"""What a router adds over a direct request, measured interleaved (bench.route_live --overhead).

One loop, ``n`` rounds; each round sends the same small request once directly to a replica and
once through each router (``round_robin``, ``prefix`` with lookups, ``kv_events``), in a
rotating order so drift on the shared box lands on every arm alike. The prompt is fully cached
after the first round (its blocks stay on the replica the prefix arms choose), ``max_tokens``
1, no stream: what differs between arms is the router's own work and hop (``--overhead-chat``:
a chat message instead, so a router on KV events renders its replicas' chat template). Reported per arm:
latency p50/p99 and the added p50/p99 (arm's percentile minus direct's), and the arm minus
direct within each round as median [min-max] (``added_per_round_ms``), in ms.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import aiohttp

from stress.report import percentile

__all__ = ["interleaved_rounds", "measure_overhead"]


async def _one(session: aiohttp.ClientSession, url: str, body: dict) -> float:
    t0 = time.perf_counter()
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    async with session.post(url + path, json=body) as resp:
        await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{url}: {resp.status}")
    return time.perf_counter() - t0


async def interleaved_rounds(targets: dict[str, str], body: dict, n: int
                             ) -> dict[str, list[float]]:
    """Seconds per request per target: 3 warm-up requests each, then ``n`` rounds of one
    request per target in a rotating order (the module docstring)."""
    names = list(targets)
    out: dict[str, list[float]] = {k: [] for k in names}
    async with aiohttp.ClientSession() as session:
        for k in names:  # warm: connections open, prompt cached on the chosen replica
            for _ in range(3):
                await _one(session, targets[k], body)
        for i in range(n):
            for k in names[i % len(names):] + names[:i % len(names)]:
                out[k].append(await _one(session, targets[k], body))
    return out


def measure_overhead(direct: str, routers: dict[str, str], prompt: list[int], n: int,
                     chat: str | None = None) -> dict:
    """``routers``: arm name -> router URL; ``direct``: the replica a cached prompt goes to;
    ``chat``: send this text as one user message to /v1/chat/completions instead (a router on
    KV events renders the replicas' chat template to hash it)."""
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0}
    if chat is not None:
        body = {"messages": [{"role": "user", "content": chat}], "max_tokens": 1,
                "temperature": 0}
    lat = asyncio.run(interleaved_rounds({"direct": direct, **routers}, body, n))
    ms = {k: sorted(1000 * x for x in v) for k, v in lat.items()}
    d50, d99 = percentile(ms["direct"], 50), percentile(ms["direct"], 99)
    res = {"rounds": n, "direct_p50_ms": round(d50, 3), "direct_p99_ms": round(d99, 3)}
    for k in routers:
        p50, p99 = percentile(ms[k], 50), percentile(ms[k], 99)
        paired = [1000 * (a - d) for a, d in zip(lat[k], lat["direct"])]  # same round
        res[k] = {"p50_ms": round(p50, 3), "p99_ms": round(p99, 3),
                  "added_p50_ms": round(p50 - d50, 3), "added_p99_ms": round(p99 - d99, 3),
                  "added_per_round_ms": [round(f(paired), 3)
                                         for f in (statistics.median, min, max)]}
    return res
